// The GGUF reader (prism/io/gguf.h) and ggml's dequantizers (prism/quant/dequantize.h).
//
// tests/data/gguf/quant_types.gguf comes from the `gguf` Python package
// (tools/make_gguf_fixtures.py): each tensor NAME has NAME.ref beside it, the package's own
// dequantization, which prism must reproduce bit for bit. The bad files below are built here,
// byte by byte.
#include "prism/io/gguf.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "io_test_util.h"
#include "prism/core/error.h"
#include "prism/io/vfs.h"
#include "prism/quant/dequantize.h"

namespace prism::io {
namespace {

using quant::GgmlType;
using test::TempDir;

const std::string kFixture = std::string(PRISM_TEST_DATA) + "/gguf/quant_types.gguf";

// ---------------------------------------------------------------------------------------------
// Building GGUF bytes.

void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
void put_string(std::string& out, std::string_view s) {
  put_u64(out, s.size());
  out += s;
}

// One encoded key-value: key, value type, payload.
std::string kv(std::string_view key, GgufValueType type, std::string_view payload) {
  std::string out;
  put_string(out, key);
  put_u32(out, static_cast<uint32_t>(type));
  return out + std::string(payload);
}
std::string kv_u32(std::string_view key, uint32_t v) {
  std::string p;
  put_u32(p, v);
  return kv(key, GgufValueType::UINT32, p);
}
std::string kv_string(std::string_view key, std::string_view s) {
  std::string p;
  put_string(p, s);
  return kv(key, GgufValueType::STRING, p);
}
std::string kv_strings(std::string_view key, const std::vector<std::string>& items) {
  std::string p;
  put_u32(p, static_cast<uint32_t>(GgufValueType::STRING));
  put_u64(p, items.size());
  for (const auto& s : items) put_string(p, s);
  return kv(key, GgufValueType::ARRAY, p);
}

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> dims;  // innermost first, as stored
  uint32_t type = 0;
  uint64_t offset = 0;
};

// A GGUF file; every field can be set wrong on purpose.
struct Gguf {
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::vector<std::string> kvs = {kv_string("general.architecture", "test"),
                                  kv_strings("tokenizer.ggml.tokens", {"a", "bc", ""})};
  std::vector<TensorSpec> tensors = {{"w", {32, 2}, 0, 0}, {"q", {64, 1}, 8, 256}};
  uint64_t alignment = 32;  // how the data section is padded (general.alignment set apart)
  std::optional<uint64_t> n_tensors, n_kv;
  std::optional<uint64_t> data_bytes;  // default: up to the end of the furthest tensor

  std::string encode() const {
    std::string out = magic;
    put_u32(out, version);
    put_u64(out, n_tensors.value_or(tensors.size()));
    put_u64(out, n_kv.value_or(kvs.size()));
    for (const auto& k : kvs) out += k;
    uint64_t end = 0;
    for (const auto& t : tensors) {
      put_string(out, t.name);
      put_u32(out, static_cast<uint32_t>(t.dims.size()));
      uint64_t numel = 1;
      for (uint64_t d : t.dims) {
        put_u64(out, d);
        numel *= d;
      }
      put_u32(out, t.type);
      put_u64(out, t.offset);
      if (auto type = quant::ggml_type_from_id(t.type)) {
        const auto& info = quant::info(*type);
        end = std::max(end, t.offset + numel / info.block_elements * info.block_bytes);
      }
    }
    out.append((alignment - out.size() % alignment) % alignment, '\0');
    out.append(data_bytes.value_or(end), '\x11');
    return out;
  }
};

std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// The error of parsing `bytes`, or "no error".
std::string parse_error(std::string_view bytes) {
  try {
    GgufHeader::parse(as_bytes(bytes), "bad.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::string parse_error(const Gguf& g) { return parse_error(g.encode()); }

// A File served from memory that is never mapped, as remote files are not: the reader then
// reads through read_at in ranges. Bytes past `bytes` (up to `size`) read as zeros, so a test
// can claim a huge file without holding it; reads are counted.
class MemoryFile : public File {
 public:
  MemoryFile(std::string bytes, std::optional<uint64_t> size = std::nullopt)
      : File("mem://test.gguf"), bytes_(std::move(bytes)), size_(size.value_or(bytes_.size())) {}
  uint64_t size() const override { return size_; }
  void read_at(uint64_t offset, std::span<std::byte> out) const override {
    if (offset > size_ || out.size() > size_ - offset) fail("{}: read past the end", uri());
    bytes_read += out.size();
    reads += 1;
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] =
          offset + i < bytes_.size() ? static_cast<std::byte>(bytes_[offset + i]) : std::byte{0};
    }
  }
  mutable uint64_t bytes_read = 0;
  mutable int reads = 0;

 private:
  std::string bytes_;
  uint64_t size_;
};

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

// ---------------------------------------------------------------------------------------------
// The fixture: metadata, tensors, dequantization.

TEST(Gguf, ReadsTheFixturesMetadata) {
  auto file = open(kFixture);
  GgufHeader h = GgufHeader::read(*file);
  EXPECT_EQ(h.version, 3u);
  EXPECT_EQ(h.alignment, 64u);
  EXPECT_EQ(h.data_offset % 64, 0u);
  EXPECT_EQ(h.get_string("general.architecture"), "prism-test");
  EXPECT_EQ(h.get_string("general.name"), "quant types");
  EXPECT_EQ(h.get_int("general.alignment"), 64);

  const std::map<std::string, GgufValueType> types = {
      {"test.u8", GgufValueType::UINT8},       {"test.i8", GgufValueType::INT8},
      {"test.u16", GgufValueType::UINT16},     {"test.i16", GgufValueType::INT16},
      {"test.u32", GgufValueType::UINT32},     {"test.i32", GgufValueType::INT32},
      {"test.f32", GgufValueType::FLOAT32},    {"test.bool_true", GgufValueType::BOOL},
      {"test.string", GgufValueType::STRING},  {"test.u64", GgufValueType::UINT64},
      {"test.i64", GgufValueType::INT64},      {"test.f64", GgufValueType::FLOAT64},
      {"test.array_i32", GgufValueType::ARRAY}};
  for (const auto& [key, type] : types) EXPECT_EQ(h.at(key).type(), type) << key;
  EXPECT_EQ(h.get_int("test.u8"), 200);
  EXPECT_EQ(h.get_int("test.i8"), -100);
  EXPECT_EQ(h.get_int("test.u16"), 65000);
  EXPECT_EQ(h.get_int("test.i16"), -32000);
  EXPECT_EQ(h.get_int("test.u32"), 4000000000);
  EXPECT_EQ(h.get_int("test.i32"), -2000000000);
  EXPECT_EQ(h.get_float("test.f32"), static_cast<double>(0.1f));
  EXPECT_TRUE(h.get_bool("test.bool_true"));
  EXPECT_FALSE(h.get_bool("test.bool_false"));
  EXPECT_EQ(h.get_string("test.string"), "h\xc3\xa9llo \"gguf\"\n");
  EXPECT_EQ(h.at("test.u64").as_uint(), 18000000000000000000ull);
  EXPECT_EQ(h.get_int("test.i64"), -9000000000000000000ll);
  EXPECT_EQ(h.get_float("test.f64"), -2.5e-300);

  EXPECT_EQ(h.get_array("test.array_i32").ints(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(h.get_array("test.array_i32").element_type(), GgufValueType::INT32);
  EXPECT_EQ(h.get_array("test.array_u8").ints(), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(h.get_array("test.array_f32").floats(), (std::vector<double>{0.5, -1.25}));
  const GgufValue& bools = h.get_array("test.array_bool");
  ASSERT_EQ(bools.size(), 3u);
  EXPECT_TRUE(bools.bool_at(0));
  EXPECT_FALSE(bools.bool_at(1));
  EXPECT_EQ(h.get_array("test.array_string").strings(),
            (std::vector<std::string_view>{"a", "", "\xc3\xbc"}));
  const GgufValue& tokens = h.get_array("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens.size(), 100u);
  EXPECT_EQ(tokens.string_at(99), "tok99");
  EXPECT_EQ(tokens.to_string(3), "ARRAY[STRING] of 100: \"tok0\", \"tok1\", \"tok2\", ...");
  EXPECT_EQ(h.at("test.i8").to_string(), "INT8 -100");
  EXPECT_EQ(h.at("test.f32").to_string(), "FLOAT32 0.1");
  EXPECT_EQ(h.at("test.string").to_string(), "STRING \"h\xc3\xa9llo \\\"gguf\\\"\\n\"");
}

TEST(Gguf, TypedLookupsNameTheFileAndKey) {
  GgufHeader h = GgufHeader::read(*open(kFixture));
  auto error = [&](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error([&] { h.get_string("test.u8"); }),
            kFixture + ": metadata 'test.u8': value is UINT8, not STRING");
  EXPECT_EQ(
      error([&] { h.get_int("test.u64"); }),
      kFixture + ": metadata 'test.u64': UINT64 value 18000000000000000000 does not fit in int64");
  EXPECT_EQ(error([&] { h.get_float("test.i32"); }),
            kFixture + ": metadata 'test.i32': value is INT32, not FLOAT32 or FLOAT64");
  EXPECT_EQ(error([&] { h.get_int("no.such.key"); }), kFixture + ": no metadata key 'no.such.key'");
  EXPECT_EQ(error([&] { h.get_array("test.u8"); }),
            kFixture + ": metadata 'test.u8': value is UINT8, not an array");
  EXPECT_EQ(error([&] { h.get_array("test.array_i32").strings(); }),
            "value is an array of INT32, not of STRING");
  EXPECT_EQ(error([&] { h.tensor("nope"); }), kFixture + ": no tensor 'nope'");
  EXPECT_EQ(h.find("nope"), nullptr);
}

TEST(Gguf, ReadsTheFixturesTensors) {
  auto file = open(kFixture);
  GgufHeader h = GgufHeader::read(*file);
  ASSERT_EQ(h.tensors.size(), 24u);
  const GgufTensor& q4k = h.tensor("q4_k");
  EXPECT_EQ(q4k.type, GgmlType::Q4_K);
  EXPECT_EQ(q4k.dims, (std::vector<int64_t>{512, 2}));
  EXPECT_EQ(q4k.shape(), (std::vector<int64_t>{2, 512}));
  EXPECT_EQ(q4k.shape_str(), "[2, 512]");
  EXPECT_EQ(q4k.bytes, 4u * 144);
  EXPECT_EQ(q4k.blocks(), 4);
  const GgufTensor& cube = h.tensor("f32_3d");
  EXPECT_EQ(cube.dims, (std::vector<int64_t>{32, 3, 2}));
  EXPECT_EQ(cube.shape_str(), "[2, 3, 32]");
  EXPECT_EQ(h.tensor("q8_0").bytes, 10u * 2 * 34);
  for (const GgufTensor& t : h.tensors) {
    EXPECT_EQ(t.offset % 64, 0u) << t.name;
    EXPECT_EQ(t.file_offset, h.data_offset + t.offset) << t.name;
  }
  EXPECT_EQ(h.tensors.front().name, "f32");  // file order
}

TEST(Gguf, DequantizesEveryTypeBitForBitAsTheGgufPackage) {
  auto file = open(kFixture);
  GgufHeader h = GgufHeader::read(*file);
  std::set<GgmlType> seen;
  for (const GgufTensor& t : h.tensors) {
    if (t.name.ends_with(".ref")) continue;
    const GgufTensor& ref = h.tensor(t.name + ".ref");
    ASSERT_EQ(ref.type, GgmlType::F32);
    ASSERT_EQ(ref.dims, t.dims) << t.name;
    std::vector<float> got = h.read_f32(*file, t);
    std::vector<float> want = h.read_f32(*file, ref);
    ASSERT_EQ(got.size(), want.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (bits_of(got[i]) != bits_of(want[i]) && mismatches++ < 5) {
        ADD_FAILURE() << t.name << " (" << quant::name(t.type) << ") element " << i << ": got "
                      << got[i] << " (0x" << std::hex << bits_of(got[i]) << "), the package 0x"
                      << bits_of(want[i]) << std::dec << " (" << want[i] << ")";
      }
    }
    EXPECT_EQ(mismatches, 0u) << t.name;
    seen.insert(t.type);
  }
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0,
                        GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                        GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    EXPECT_TRUE(seen.contains(type)) << quant::name(type) << " is not in the fixture";
    EXPECT_TRUE(quant::can_dequantize(type));
  }
}

TEST(Gguf, DequantizesARangeOfBlocks) {
  auto file = open(kFixture);
  GgufHeader h = GgufHeader::read(*file);
  for (const char* name : {"q4_k", "q6_k", "q5_0"}) {
    const GgufTensor& t = h.tensor(name);
    const auto& info = quant::info(t.type);
    std::vector<std::byte> bytes(t.bytes);
    h.read_tensor_bytes(*file, t, bytes);
    std::vector<float> whole = h.read_f32(*file, t);
    // Blocks [1, 3): the same values as the whole tensor's.
    std::vector<float> part(2 * info.block_elements);
    quant::dequantize(t.type, std::span(bytes).subspan(info.block_bytes, 2 * info.block_bytes),
                      part);
    EXPECT_EQ(0, std::memcmp(part.data(), whole.data() + info.block_elements,
                             part.size() * sizeof(float)))
        << name;
  }
}

TEST(Gguf, DequantizeChecksItsArguments) {
  std::vector<std::byte> src(144 + 1);
  std::vector<float> dst(256);
  EXPECT_THROW(quant::dequantize(GgmlType::Q4_K, src, dst), Error);  // not whole blocks
  EXPECT_THROW(
      quant::dequantize(GgmlType::Q4_K, std::span(src).first(144), std::span(dst).first(255)),
      Error);
  EXPECT_FALSE(quant::can_dequantize(GgmlType::Q2_K));
  try {
    quant::dequantize(GgmlType::Q2_K, std::span(src).first(84), dst);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "dequantize: no dequantization for ggml type Q2_K yet");
  }
}

TEST(Gguf, TypeTable) {
  EXPECT_EQ(quant::info(GgmlType::Q4_K).block_bytes, 144);
  EXPECT_EQ(quant::info(GgmlType::Q5_K).block_bytes, 176);
  EXPECT_EQ(quant::info(GgmlType::Q6_K).block_bytes, 210);
  EXPECT_EQ(quant::info(GgmlType::Q8_0).block_bytes, 34);
  EXPECT_EQ(quant::info(GgmlType::Q4_0).block_elements, 32);
  EXPECT_EQ(quant::ggml_type_from_id(30), GgmlType::BF16);
  EXPECT_EQ(quant::ggml_type_from_id(4), std::nullopt);  // Q4_2, retired
  EXPECT_EQ(quant::ggml_type_from_name("Q5_1"), GgmlType::Q5_1);
}

// ---------------------------------------------------------------------------------------------
// Ranged reads: a file that is not mapped (as remote ones are not) is read in growing ranges,
// and only its header.

TEST(Gguf, ReadsOnlyTheHeaderOfAnUnmappedFile) {
  std::string fixture = test::read_bytes(kFixture);
  GgufHeader mapped = GgufHeader::read(*open(kFixture));
  // 64 MiB of data after the header, never read.
  MemoryFile file(fixture, fixture.size() + (64ull << 20));
  GgufHeader h = GgufHeader::read(file);
  EXPECT_EQ(h.tensors.size(), mapped.tensors.size());
  EXPECT_EQ(h.data_offset, mapped.data_offset);
  EXPECT_EQ(file.reads, 1);  // a 3 KiB header fits in the first range
  EXPECT_LE(file.bytes_read, 64u << 10);

  // A header larger than the first range: several ranges, still the header only.
  Gguf big;
  std::vector<std::string> tokens;
  for (int i = 0; i < 30000; ++i) tokens.push_back(fmt::format("token{}", i));
  big.kvs.push_back(kv_strings("tokenizer.big", tokens));
  std::string bytes = big.encode();
  MemoryFile big_file(bytes, bytes.size() + (1ull << 30));
  GgufHeader bh = GgufHeader::read(big_file);
  EXPECT_EQ(bh.get_array("tokenizer.big").string_at(29999), "token29999");
  EXPECT_GT(big_file.reads, 1);
  EXPECT_LT(big_file.bytes_read, 2 * bh.data_offset + (64u << 10));
}

// ---------------------------------------------------------------------------------------------
// Bad files: one clear error each.

TEST(Gguf, TheBaseFileIsValid) {
  Gguf g;
  GgufHeader h = GgufHeader::parse(as_bytes(g.encode()), "ok.gguf");
  EXPECT_EQ(h.alignment, 32u);
  EXPECT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensor("q").type, GgmlType::Q8_0);
  EXPECT_EQ(h.tensor("q").bytes, 2u * 34);
  EXPECT_EQ(h.get_array("tokenizer.ggml.tokens").strings(),
            (std::vector<std::string_view>{"a", "bc", ""}));
  g.version = 2;  // version 2 differs from 3 only for big-endian files
  EXPECT_EQ(parse_error(g), "no error");
}

TEST(Gguf, RejectsEveryTruncation) {
  // Every prefix of a small file, and of the fixture up to its last tensor's end, is one
  // prism::Error naming the file.
  for (const std::string& whole : {Gguf().encode(), test::read_bytes(kFixture)}) {
    GgufHeader h = GgufHeader::parse(as_bytes(whole), "whole.gguf");
    uint64_t end = 0;
    for (const auto& t : h.tensors) end = std::max(end, t.file_offset + t.bytes);
    for (uint64_t n = 0; n < end; n += n < h.data_offset ? 1 : 61) {
      std::string e = parse_error(std::string_view(whole).substr(0, n));
      EXPECT_TRUE(e.starts_with("bad.gguf: ")) << "cut at " << n << ": " << e;
      EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    }
  }
  // Through the file system, and through ranged reads.
  TempDir dir;
  std::string bytes = Gguf().encode();
  test::write_bytes(dir.str("cut.gguf"), bytes.substr(0, 137));
  try {
    GgufHeader::read(*open(dir.str("cut.gguf")));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with(dir.str("cut.gguf") + ": truncated: "))
        << e.what();
  }
  for (size_t n : {3, 10, 30, 60, 100, 150}) {
    MemoryFile cut(bytes.substr(0, n));
    EXPECT_THROW(GgufHeader::read(cut), Error) << n;
  }
}

TEST(Gguf, TruncationErrorsSayWhere) {
  std::string bytes = Gguf().encode();
  EXPECT_EQ(parse_error(bytes.substr(0, 2)),
            "bad.gguf: not a GGUF file: it has 2 bytes, fewer than the 4 of the magic");
  EXPECT_EQ(parse_error(bytes.substr(0, 6)),
            "bad.gguf: truncated: the header needs 4 bytes at offset 4, but the file ends at 6");
  // Counts that the bytes left cannot hold say so before anything is read.
  EXPECT_EQ(parse_error(bytes.substr(0, 40)),
            "bad.gguf: 2 metadata key-values cannot fit in the 16 bytes left; the file is "
            "truncated or corrupt");
  // In the token array, once its count fits: a string's length.
  EXPECT_EQ(parse_error(bytes.substr(0, 130)),
            "bad.gguf: metadata 'tokenizer.ggml.tokens': an array of 3 STRING at offset 113 "
            "cannot fit in the 17 bytes left; the file is truncated or corrupt");
  EXPECT_EQ(parse_error(bytes.substr(0, 137)),
            "bad.gguf: truncated: metadata 'tokenizer.ggml.tokens' needs 8 bytes at offset 132, "
            "but the file ends at 137");
  // A string's bytes.
  Gguf g;
  g.tensors = {};
  g.kvs = {kv_string("k", std::string(100, 'x'))};
  EXPECT_EQ(parse_error(g.encode().substr(0, 100)),
            "bad.gguf: metadata 'k': a string of 100 bytes at offset 45 runs past the end of the "
            "file (100 bytes); the file is truncated or corrupt");
}

TEST(Gguf, RejectsBadMagicAndVersions) {
  Gguf g;
  g.magic = "GGML";
  EXPECT_EQ(parse_error(g),
            "bad.gguf: not a GGUF file: it starts with bytes 47474d4c, not \"GGUF\"");
  g = Gguf();
  g.version = 1;
  EXPECT_EQ(parse_error(g),
            "bad.gguf: GGUF version 1 is not supported (it predates 64-bit counts); convert the "
            "model again with a current llama.cpp");
  g.version = 4;
  EXPECT_EQ(parse_error(g), "bad.gguf: unsupported GGUF version 4 (versions 2 and 3 are read)");
  g.version = 0x03000000;
  EXPECT_EQ(parse_error(g),
            "bad.gguf: a big-endian GGUF file (version 3); only little-endian files are supported");
}

TEST(Gguf, RejectsAbsurdCountsAndLengths) {
  Gguf g;
  g.n_kv = 1ull << 60;
  EXPECT_TRUE(
      parse_error(g).starts_with("bad.gguf: 1152921504606846976 metadata key-values "
                                 "cannot fit in the"))
      << parse_error(g);
  g = Gguf();
  g.n_tensors = 1ull << 40;
  EXPECT_TRUE(
      parse_error(g).starts_with("bad.gguf: 1099511627776 tensor infos (and 2 "
                                 "key-values) cannot fit"))
      << parse_error(g);
  // A key whose length is absurd.
  g = Gguf();
  std::string key;
  put_u64(key, 1ull << 62);
  g.kvs = {key};
  EXPECT_TRUE(
      parse_error(g).starts_with("bad.gguf: metadata key-value 0 of 1: a string of "
                                 "4611686018427387904 bytes at offset 32 runs past"))
      << parse_error(g);
  // A string value, an array, and a string in an array whose lengths are absurd.
  g = Gguf();
  std::string p;
  put_u64(p, 1ull << 50);
  g.kvs = {kv("s", GgufValueType::STRING, p)};
  EXPECT_TRUE(parse_error(g).starts_with("bad.gguf: metadata 's': a string of")) << parse_error(g);
  p.clear();
  put_u32(p, static_cast<uint32_t>(GgufValueType::UINT32));
  put_u64(p, 1ull << 61);
  g.kvs = {kv("a", GgufValueType::ARRAY, p)};
  EXPECT_TRUE(
      parse_error(g).starts_with("bad.gguf: metadata 'a': an array of 2305843009213693952 "
                                 "UINT32 at offset"))
      << parse_error(g);
  p.clear();
  put_u32(p, static_cast<uint32_t>(GgufValueType::STRING));
  put_u64(p, 2);
  put_string(p, "ok");
  put_u64(p, 1ull << 40);
  g.kvs = {kv("a", GgufValueType::ARRAY, p)};
  EXPECT_TRUE(
      parse_error(g).starts_with("bad.gguf: metadata 'a': a string of 1099511627776 "
                                 "bytes"))
      << parse_error(g);
  // A huge (remote) file whose corrupt string length fits in it: refused at the header bound,
  // not read or allocated.
  p.clear();
  put_u64(p, 300ull << 20);
  g.kvs = {kv("s", GgufValueType::STRING, p)};
  MemoryFile huge(g.encode(), 1ull << 40);
  try {
    GgufHeader::read(huge);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(
        std::string(e.what()).ends_with("runs past the end of the 256 MiB a header may "
                                        "take; the file is truncated or corrupt"))
        << e.what();
  }
  EXPECT_LT(huge.bytes_read, 1u << 20);
}

TEST(Gguf, RejectsBadMetadata) {
  Gguf g;
  g.kvs.push_back(kv_string("general.architecture", "again"));
  EXPECT_EQ(parse_error(g), "bad.gguf: metadata key 'general.architecture' appears twice");
  g = Gguf();
  g.kvs = {kv("x", static_cast<GgufValueType>(13), "")};
  EXPECT_EQ(parse_error(g), "bad.gguf: metadata 'x': unknown value type 13");
  std::string p;
  put_u32(p, static_cast<uint32_t>(GgufValueType::ARRAY));
  put_u64(p, 1);
  g.kvs = {kv("nested", GgufValueType::ARRAY, p)};
  EXPECT_EQ(parse_error(g), "bad.gguf: metadata 'nested': arrays of arrays are not supported");
  p.clear();
  put_u32(p, 77);
  put_u64(p, 1);
  g.kvs = {kv("a", GgufValueType::ARRAY, p)};
  EXPECT_EQ(parse_error(g), "bad.gguf: metadata 'a': unknown array element type 77");
  g.kvs = {kv("b", GgufValueType::BOOL, "\x02")};
  EXPECT_EQ(parse_error(g), "bad.gguf: metadata 'b': BOOL byte 2 at offset 37 is neither 0 nor 1");
}

TEST(Gguf, ChecksTheAlignment) {
  Gguf g;
  g.alignment = 64;
  g.kvs.push_back(kv_u32("general.alignment", 64));
  g.tensors = {{"w", {32}, 0, 0}, {"v", {16}, 0, 128}};
  GgufHeader h = GgufHeader::parse(as_bytes(g.encode()), "ok.gguf");
  EXPECT_EQ(h.alignment, 64u);
  EXPECT_EQ(h.data_offset % 64, 0u);
  g.kvs.back() = kv_u32("general.alignment", 0);
  EXPECT_EQ(parse_error(g), "bad.gguf: general.alignment 0 is not a power of two");
  g.kvs.back() = kv_u32("general.alignment", 48);
  EXPECT_EQ(parse_error(g), "bad.gguf: general.alignment 48 is not a power of two");
  std::string p;
  put_u64(p, 64);
  g.kvs.back() = kv("general.alignment", GgufValueType::UINT64, p);
  EXPECT_EQ(parse_error(g), "bad.gguf: general.alignment is UINT64, it must be UINT32");
  // Offsets must be multiples of it.
  g = Gguf();
  g.tensors = {{"w", {32}, 0, 0}, {"v", {16}, 0, 130}};
  EXPECT_EQ(parse_error(g),
            "bad.gguf: tensor 'v': offset 130 is not a multiple of the alignment 32");
}

TEST(Gguf, RejectsBadTensorInfos) {
  Gguf g;
  g.tensors.push_back({"w", {4}, 0, 512});
  EXPECT_EQ(parse_error(g), "bad.gguf: tensor 'w' appears twice");
  g = Gguf();
  g.tensors = {{"x", {2, 2, 2, 2, 2}, 0, 0}};
  EXPECT_EQ(parse_error(g), "bad.gguf: tensor 'x' has 5 dims, at most 4 are allowed");
  g.tensors = {{"x", {32}, 4, 0}};
  EXPECT_EQ(parse_error(g), "bad.gguf: tensor 'x': unknown ggml type 4");
  g.tensors = {{"x", {32}, 99, 0}};
  EXPECT_EQ(parse_error(g), "bad.gguf: tensor 'x': unknown ggml type 99");
  g.tensors = {{"x", {100, 2}, 12, 0}};
  EXPECT_EQ(parse_error(g),
            "bad.gguf: tensor 'x': rows of 100 elements are not whole Q4_K blocks of 256");
  g.tensors = {{"x", {1ull << 32, 1ull << 32}, 0, 0}};
  g.data_bytes = 0;
  EXPECT_EQ(
      parse_error(g),
      "bad.gguf: tensor 'x': dims 4294967296 x 4294967296 have more elements than int64 can count");
  g.tensors = {{"x", {1ull << 63}, 0, 0}};
  EXPECT_EQ(parse_error(g),
            "bad.gguf: tensor 'x': dim 0 is 9223372036854775808, which does not fit in int64");
  // int64 counts it, but its bytes do not fit in 64 bits.
  g.tensors = {{"x", {1ull << 62}, 27, 0}};
  EXPECT_EQ(
      parse_error(g),
      "bad.gguf: tensor 'x': I64 x [4611686018427387904] needs more bytes than a file can hold");
}

TEST(Gguf, RejectsTensorsOutsideTheFileOrOverlapping) {
  Gguf g;
  g.tensors = {{"w", {32, 2}, 0, 0}, {"q", {64, 1}, 8, 1ull << 40}};
  g.data_bytes = 256;
  std::string e = parse_error(g);
  EXPECT_TRUE(
      e.starts_with("bad.gguf: tensor 'q' (Q8_0 [1, 64], 68 bytes at data offset "
                    "1099511627776) lies outside the file"))
      << e;
  // Partly outside: the file ends inside it.
  g.tensors = {{"w", {32, 2}, 0, 0}, {"q", {64, 1}, 8, 256}};
  g.data_bytes = 256 + 67;
  EXPECT_TRUE(
      parse_error(g).starts_with("bad.gguf: tensor 'q' (Q8_0 [1, 64], 68 bytes at data "
                                 "offset 256) lies outside the file"))
      << parse_error(g);
  // An offset so large that adding it to the data section's start would wrap around.
  g.tensors = {{"w", {32, 2}, 0, UINT64_MAX - 31}};
  g.data_bytes = 256;
  EXPECT_TRUE(parse_error(g).find("lies outside the file") != std::string::npos) << parse_error(g);
  // Overlaps, whatever the order of the infos.
  g = Gguf();
  g.tensors = {{"a", {32, 2}, 0, 0}, {"b", {16}, 0, 224}};
  EXPECT_EQ(parse_error(g),
            "bad.gguf: tensor 'b' (data bytes [224, 288)) overlaps tensor 'a' ([0, 256))");
  g.tensors = {{"b", {16}, 0, 224}, {"a", {32, 2}, 0, 0}};
  EXPECT_EQ(parse_error(g),
            "bad.gguf: tensor 'b' (data bytes [224, 288)) overlaps tensor 'a' ([0, 256))");
  g.tensors = {{"a", {8}, 0, 64}, {"b", {8}, 0, 64}};
  EXPECT_TRUE(parse_error(g).find("overlaps") != std::string::npos) << parse_error(g);
  // Adjacent tensors and holes between them are fine.
  g.tensors = {{"a", {8}, 0, 0}, {"b", {8}, 0, 32}, {"c", {8}, 0, 128}};
  EXPECT_EQ(parse_error(g), "no error");
}

TEST(Gguf, RecognizesGgufFiles) {
  TempDir dir;
  test::write_bytes(dir.str("model.bin"), Gguf().encode());
  test::write_bytes(dir.str("other.bin"), "not gguf at all");
  EXPECT_TRUE(is_gguf(*open(dir.str("model.bin"))));
  EXPECT_FALSE(is_gguf(*open(dir.str("other.bin"))));
  EXPECT_TRUE(is_gguf_magic(as_bytes("GGUF\x03")));
}

}  // namespace
}  // namespace prism::io
