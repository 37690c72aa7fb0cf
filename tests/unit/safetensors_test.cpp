#include "prism/io/safetensors.h"

#include <gtest/gtest.h>

#include "io_test_util.h"
#include "prism/core/error.h"
#include "prism/io/vfs.h"

namespace prism::io {
namespace {

using test::TempDir;

// A file with the given JSON header followed by `data_bytes` zero bytes.
std::string with_header(std::string_view json, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  out += json;
  out.append(data_bytes, '\0');
  return out;
}

// The error message of reading the header of `bytes` stored as `dir/name`.
std::string header_error(const TempDir& dir, std::string_view bytes,
                         const std::string& name = "bad.safetensors") {
  std::string path = dir.str(name);
  test::write_bytes(path, bytes);
  try {
    SafetensorsHeader::read(*open(path));
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Safetensors, RoundTripsThroughTheWriter) {
  TempDir dir;
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {0x3f80, 0x4000};
  std::vector<uint8_t> c = {0x38, 0x40, 0x44};
  SafetensorsEntry entries[] = {
      {"a", SafetensorsDType::F32, {2, 3}, std::as_bytes(std::span(a))},
      {"b", SafetensorsDType::BF16, {2}, std::as_bytes(std::span(b))},
      {"c", SafetensorsDType::F8_E4M3, {3}, std::as_bytes(std::span(c))},
  };
  write_safetensors(dir.str("m.safetensors"), entries, {{"format", "pt"}});
  auto file = open(dir.str("m.safetensors"));
  auto header = SafetensorsHeader::read(*file);
  EXPECT_EQ(header.data_offset % 8, 0u);
  EXPECT_EQ(header.metadata.at("format"), "pt");
  ASSERT_EQ(header.tensors.size(), 3u);
  EXPECT_EQ(header.tensors[0].name, "a");
  EXPECT_EQ(header.tensors[0].shape_str(), "[2, 3]");
  EXPECT_EQ(header.tensors[0].core_shape(), Shape(DType::f32, {{Tag(), 2}, {Tag(), 3}}));
  EXPECT_EQ(header.tensors[1].dtype, SafetensorsDType::BF16);
  EXPECT_EQ(header.tensors[2].dtype, SafetensorsDType::F8_E4M3);
  EXPECT_EQ(header.tensors[2].bytes(), 3u);
  std::vector<float> back(6);
  file->read_at(header.data_offset + header.tensors[0].begin,
                std::as_writable_bytes(std::span(back)));
  EXPECT_EQ(back, a);
  // F8 parses and is reported, but has no core dtype to load into yet.
  try {
    header.tensors[2].core_shape();
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "tensor 'c': dtype F8_E4M3 is not supported by prism's core yet (it can be "
                 "inspected but not loaded)");
  }
}

TEST(Safetensors, DTypeTableMatchesTheCore) {
  for (auto t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32,
                 DType::i16, DType::i8, DType::u8, DType::u32, DType::boolean}) {
    SafetensorsDType s = from_core_dtype(t);
    EXPECT_EQ(to_core_dtype(s), t);
    EXPECT_EQ(size_of(s), prism::size_of(t));
    EXPECT_EQ(safetensors_dtype_from_name(name(s)), s);
  }
  EXPECT_EQ(safetensors_dtype_from_name("F8_E5M2"), SafetensorsDType::F8_E5M2);
  EXPECT_EQ(safetensors_dtype_from_name("F4"), std::nullopt);
}

TEST(Safetensors, RejectsTruncatedFile) {
  TempDir dir;
  std::vector<float> a(16, 1.0f);
  SafetensorsEntry e[] = {{"w", SafetensorsDType::F32, {16}, std::as_bytes(std::span(a))}};
  std::string bytes = encode_safetensors(e);
  std::string error = header_error(dir, bytes.substr(0, bytes.size() - 10));
  EXPECT_NE(error.find("bad.safetensors: tensor 'w': data_offsets [0, 64] are out of bounds "
                       "(the data section holds 54 bytes)"),
            std::string::npos)
      << error;
  EXPECT_NE(header_error(dir, "abc").find("bad.safetensors: file is 3 bytes, too short"),
            std::string::npos);
}

// Found by fuzz/fuzz_safetensors: a number too large for the JSON reader ended the process
// with an uncaught nlohmann exception instead of one error line.
TEST(Safetensors, RejectsNumbersOutOfRange) {
  TempDir dir;
  std::string error = header_error(
      dir, with_header(R"({"w":{"dtype":"F32","shape":[8e814080],"data_offsets":[0,4]}})", 4));
  EXPECT_NE(error.find("bad.safetensors: header is not valid JSON"), std::string::npos) << error;
}

TEST(Safetensors, RejectsHeaderLengthLargerThanFile) {
  TempDir dir;
  std::string bytes = with_header("{}", 0);
  bytes[0] = static_cast<char>(0x40);  // claims 64 bytes of header, the file has 2
  std::string error = header_error(dir, bytes);
  EXPECT_NE(error.find("bad.safetensors: header length 64 is larger than the file (10 bytes)"),
            std::string::npos)
      << error;
}

TEST(Safetensors, RejectsOverlappingOffsets) {
  TempDir dir;
  std::string error =
      header_error(dir, with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                    12));
  EXPECT_NE(error.find("bad.safetensors: tensor 'b' [4, 12] overlaps tensor 'a' [0, 8]"),
            std::string::npos)
      << error;
}

TEST(Safetensors, RejectsUnknownDType) {
  TempDir dir;
  std::string error =
      header_error(dir, with_header(R"({"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1));
  EXPECT_NE(error.find("bad.safetensors: tensor 'a': unknown dtype \"F4\""), std::string::npos)
      << error;
}

TEST(Safetensors, RejectsSizeNotMatchingDTypeTimesShape) {
  TempDir dir;
  std::string error = header_error(
      dir, with_header(R"({"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", 8));
  EXPECT_NE(error.find("tensor 'a': BF16 x [2, 3] needs 12 bytes but data_offsets [0, 8] hold 8"),
            std::string::npos)
      << error;
}

TEST(Safetensors, RejectsHolesTrailingBytesAndBadJson) {
  TempDir dir;
  EXPECT_NE(
      header_error(dir, with_header(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4))
          .find("2 unused bytes before tensor 'a'"),
      std::string::npos);
  EXPECT_NE(
      header_error(dir, with_header(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 5))
          .find("the data section holds 5 bytes but the tensors cover 2"),
      std::string::npos);
  EXPECT_NE(header_error(dir, with_header(R"({"a": )", 0)).find("header is not valid JSON"),
            std::string::npos);
  EXPECT_NE(
      header_error(dir, with_header(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", 0))
          .find("shape must hold non-negative integers"),
      std::string::npos);
  EXPECT_NE(header_error(dir, with_header(R"({"__metadata__":{"x":1}})", 0))
                .find("__metadata__ value 'x' is not a string"),
            std::string::npos);
}

TEST(Safetensors, AcceptsEmptyAndZeroSizedTensors) {
  TempDir dir;
  EXPECT_EQ(header_error(dir, with_header("{}", 0)), "no error");
  EXPECT_EQ(
      header_error(dir, with_header(R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},)"
                                    R"("s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
                                    4)),
      "no error");
}

}  // namespace
}  // namespace prism::io
