// prism/quant/quantize.h, io::GgufWriter and llm::export_gguf.
//
// tests/data/gguf/quantize_ref.gguf comes from the `gguf` Python package
// (tools/make_quantize_fixtures.py): F16, BF16, Q8_0, Q4_0 and Q5_0 must be its bytes exactly. Q4_K
// has no quantizer there; it is held to its error bound here and compared with llama.cpp's
// llama-quantize by tools/check_quantize_llamacpp.sh where llama.cpp is built.
#include "prism/quant/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "io_test_util.h"
#include "prism/backends/registry.h"
#include "prism/core/error.h"
#include "prism/io/gguf.h"
#include "prism/io/gguf_writer.h"
#include "prism/io/vfs.h"
#include "prism/llm/engine.h"
#include "prism/llm/gguf_export.h"
#include "prism/quant/dequantize.h"

namespace prism::quant {
namespace {

const std::string kReference = std::string(PRISM_TEST_DATA) + "/gguf/quantize_ref.gguf";

std::vector<std::byte> quantized(GgmlType type, std::span<const float> x) {
  const GgmlTypeInfo& t = info(type);
  std::vector<std::byte> out(x.size() / t.block_elements * t.block_bytes);
  quantize(type, x, out);
  return out;
}

std::vector<float> round_trip(GgmlType type, std::span<const float> x) {
  std::vector<float> back(x.size());
  dequantize(type, quantized(type, x), back);
  return back;
}

TEST(Quantize, EqualsTheGgufPackageBitForBit) {
  auto file = io::open(kReference);
  const io::GgufHeader h = io::GgufHeader::read(*file);
  for (const char* name : {"f16", "bf16", "q8_0", "q4_0", "q5_0"}) {
    SCOPED_TRACE(name);
    const io::GgufTensor& src = h.tensor(std::string(name) + ".src");
    const io::GgufTensor& ref = h.tensor(name);
    std::vector<std::byte> want(ref.bytes);
    h.read_tensor_bytes(*file, ref, want);
    const std::vector<std::byte> got = quantized(ref.type, h.read_f32(*file, src));
    ASSERT_EQ(got.size(), want.size());
    const size_t block = info(ref.type).block_bytes;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "byte " << i << " (block " << i / block << ")";
    }
  }
}

// Rows of normal noise at several scales, with an outlier in some blocks.
std::vector<float> noise(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    const float scale = (i / 256 % 3 == 0) ? 0.02f : (i / 256 % 3 == 1) ? 1.0f : 40.0f;
    x[i] = normal(rng) * scale + (i % 97 == 0 ? 5 * scale : 0);
  }
  return x;
}

// Every element within the format's error bound: Q8_0's d / 2 (rounding to nearest), Q4_0's
// |d| (its top value can be clipped by a step), both plus the f16 rounding of d, and Q4_K's
// step d * scale of its sub-block (the levels are recomputed against the stored scales, but the
// offset is rounded to 6 bits).
TEST(Quantize, RoundTripsWithinEachFormatsErrorBound) {
  const std::vector<float> x = noise(256 * 24, 7);
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K}) {
    SCOPED_TRACE(std::string(name(type)));
    const std::vector<std::byte> q = quantized(type, x);
    std::vector<float> back(x.size());
    dequantize(type, q, back);
    const GgmlTypeInfo& t = info(type);
    double err2 = 0, x2 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const auto* b =
          reinterpret_cast<const uint8_t*>(q.data()) + i / t.block_elements * t.block_bytes;
      uint16_t d_bits;
      std::memcpy(&d_bits, b, 2);
      float step = std::fabs(f16_to_f32(d_bits));
      // The values were divided by the f32 scale, which is stored rounded to f16 (a relative
      // error up to 2^-11, times up to 127 or 8 levels).
      if (type == GgmlType::Q8_0) step *= 0.5f + 127.0f / 2048;
      if (type == GgmlType::Q4_0) step *= 1 + 8.0f / 2048;
      if (type == GgmlType::Q4_K) {
        const int s = static_cast<int>(i % 256 / 32);
        const uint8_t* sc = b + 4;
        const int scale = s < 4 ? sc[s] & 0x3f : (sc[s + 4] & 0x0f) | ((sc[s - 4] >> 6) << 4);
        step *= static_cast<float>(scale);
        step = std::max(step, 1e-30f);
      }
      ASSERT_LE(std::fabs(back[i] - x[i]), step * 1.001f + 1e-6f) << "element " << i;
      err2 += (back[i] - x[i]) * (back[i] - x[i]);
      x2 += x[i] * x[i];
    }
    // 4-bit formats keep the error near a tenth of the signal, 8-bit far below.
    EXPECT_LT(std::sqrt(err2 / x2), type == GgmlType::Q8_0 ? 0.01 : 0.12);
  }
}

TEST(Quantize, Q4KBeatsQ4_0OnNoise) {
  // The reason Q4_K exists: per-sub-block scales and offsets fitted by least squares.
  const std::vector<float> x = noise(256 * 24, 11);
  auto rms = [&](GgmlType type) {
    const std::vector<float> back = round_trip(type, x);
    double e = 0;
    for (size_t i = 0; i < x.size(); ++i) e += (back[i] - x[i]) * (back[i] - x[i]);
    return std::sqrt(e / x.size());
  };
  EXPECT_LT(rms(GgmlType::Q4_K), rms(GgmlType::Q4_0));
}

TEST(Quantize, ZerosAndConstantsAreExact) {
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K}) {
    for (float v : {0.0f, 0.5f, -3.0f}) {
      const std::vector<float> x(256, v);
      const std::vector<float> back = round_trip(type, x);
      for (float b : back) ASSERT_NEAR(b, v, std::fabs(v) * 2e-3) << name(type) << " " << v;
    }
  }
}

TEST(Quantize, ChecksItsArguments) {
  std::vector<float> x(33);
  std::vector<std::byte> out(34);
  EXPECT_THROW(quantize(GgmlType::Q8_0, x, out), Error);  // not whole blocks
  EXPECT_THROW(quantize(GgmlType::Q8_0, std::span(x).first(32), std::span(out).first(33)), Error);
  EXPECT_THROW(quantize(GgmlType::Q6_K, x, out), Error);  // no quantizer
  EXPECT_TRUE(can_quantize(GgmlType::Q4_K));
  EXPECT_FALSE(can_quantize(GgmlType::Q5_K));
}

TEST(Quantize, TypeForTensorFollowsLlamaCpp) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(type_for_tensor(GgmlType::Q4_K, V{4096}), GgmlType::F32);  // norms stay f32
  EXPECT_EQ(type_for_tensor(GgmlType::Q4_K, V{64, 4096}), GgmlType::Q4_K);
  EXPECT_EQ(type_for_tensor(GgmlType::Q4_K, V{64, 96}), GgmlType::Q5_0);  // rows of 32s
  EXPECT_EQ(type_for_tensor(GgmlType::Q4_K, V{64, 48}), GgmlType::F16);
  EXPECT_EQ(type_for_tensor(GgmlType::Q8_0, V{64, 48}), GgmlType::F16);
  EXPECT_EQ(type_for_tensor(GgmlType::Q8_0, V{64, 64}), GgmlType::Q8_0);
  EXPECT_EQ(type_for_tensor(GgmlType::BF16, V{64, 48}), GgmlType::BF16);
}

TEST(GgufWriter, WritesWhatTheReaderReads) {
  test::TempDir dir;
  io::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("a.u32", 7);
  w.set_i32("a.i32", -7);
  w.set_f32("a.f32", 0.25f);
  w.set_bool("a.bool", true);
  w.set_strings("a.strings", {"x", "", "ü"});
  const int32_t ints[] = {1, -2, 3};
  w.set_i32s("a.ints", ints);
  EXPECT_THROW(w.set_u32("a.u32", 8), Error);
  w.add_tensor("t.f32", {3}, GgmlType::F32);
  w.add_tensor("t.q8", {2, 64}, GgmlType::Q8_0);
  EXPECT_THROW(w.add_tensor("t.bad", {2, 48}, GgmlType::Q8_0), Error);
  const std::vector<float> v3 = {1, 2, 3};
  const std::vector<float> v128 = noise(128, 3);
  const std::vector<std::byte> q8 = quantized(GgmlType::Q8_0, v128);
  const std::string path = dir.str("m.gguf");
  w.write(path, [&](size_t i, const io::GgufWriter::Sink& sink) {
    if (i == 0) sink(std::as_bytes(std::span(v3)));
    if (i == 1) {  // in two pieces
      sink(std::span(q8).first(34));
      sink(std::span(q8).subspan(34));
    }
  });
  auto file = io::open(path);
  const io::GgufHeader h = io::GgufHeader::read(*file);
  EXPECT_EQ(h.version, 3u);
  EXPECT_EQ(h.get_string("general.architecture"), "llama");
  EXPECT_EQ(h.get_int("a.u32"), 7);
  EXPECT_EQ(h.get_int("a.i32"), -7);
  EXPECT_EQ(h.get_float("a.f32"), 0.25);
  EXPECT_TRUE(h.get_bool("a.bool"));
  EXPECT_EQ(h.get_array("a.strings").string_at(2), "ü");
  EXPECT_EQ(h.get_array("a.ints").ints(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(h.read_f32(*file, h.tensor("t.f32")), v3);
  EXPECT_EQ(h.tensor("t.q8").shape(), (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(h.read_f32(*file, h.tensor("t.q8")), round_trip(GgmlType::Q8_0, v128));
}

TEST(GgufWriter, LeavesNoFileOnAnError) {
  test::TempDir dir;
  io::GgufWriter w;
  w.add_tensor("t", {4}, GgmlType::F32);
  const std::string path = dir.str("m.gguf");
  test::write_bytes(path, "old");
  // A tensor given too few bytes, or a fill that throws: the old file stays, nothing else.
  const float two[] = {1, 2};
  EXPECT_THROW(
      w.write(path, [&](size_t,
                        const io::GgufWriter::Sink& sink) { sink(std::as_bytes(std::span(two))); }),
      Error);
  EXPECT_THROW(w.write(path, [](size_t, const io::GgufWriter::Sink&) { fail("boom"); }), Error);
  EXPECT_EQ(test::read_bytes(path), "old");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
  try {
    w.write(dir.str("missing/m.gguf"), [](size_t, const io::GgufWriter::Sink&) {});
    FAIL() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write " + dir.str("missing/m.gguf")),
              std::string::npos)
        << e.what();
  }
}

// Both files hold the same tensors: names, types, dims and bytes (rope_freqs: the same factors
// within 1e-5, computed in another order).
void expect_same_tensors(const io::GgufHeader& ours, io::File& ours_file,
                         const io::GgufHeader& theirs, io::File& theirs_file) {
  ASSERT_EQ(ours.tensors.size(), theirs.tensors.size());
  for (const io::GgufTensor& t : theirs.tensors) {
    SCOPED_TRACE(t.name);
    const io::GgufTensor& o = ours.tensor(t.name);
    ASSERT_EQ(o.type, t.type);
    ASSERT_EQ(o.dims, t.dims);
    if (t.name == "rope_freqs.weight") {
      const std::vector<float> fa = ours.read_f32(ours_file, o);
      const std::vector<float> fb = theirs.read_f32(theirs_file, t);
      for (size_t i = 0; i < fa.size(); ++i) EXPECT_NEAR(fa[i], fb[i], 1e-5 * fb[i]);
      continue;
    }
    std::vector<std::byte> a(o.bytes), b(t.bytes);
    ours.read_tensor_bytes(ours_file, o, a);
    theirs.read_tensor_bytes(theirs_file, t, b);
    EXPECT_TRUE(a == b);
  }
}

// The logits after the same five tokens from model file `a` and checkpoint `b`, in f32 on the
// CPU.
std::pair<std::vector<float>, std::vector<float>> first_logits(const std::string& a,
                                                               const std::string& b) {
  llm::EngineOptions o;
  o.seqlen = 64;
  o.dtype = DType::f32;
  o.load.report = false;
  Platform& cpu = get_platform("cpu");
  llm::Engine first(a, cpu, o), second(b, cpu, o);
  const std::vector<int32_t> prompt{1, 2, 3, 10, 20};
  return {first.feed(prompt), second.feed(prompt)};
}

// The GGUF file `ours` against the fixture `fixture` (in PRISM_GGUF_DIR): the same tensors
// byte for byte, and the same values at the integer keys `ints`. Returns both headers, ours
// first, for the caller's other checks.
std::pair<io::GgufHeader, io::GgufHeader> expect_like_fixture(
    const std::string& ours, const std::string& fixture, std::initializer_list<const char*> ints) {
  auto ours_file = io::open(ours);
  auto theirs_file = io::open(std::string(PRISM_GGUF_DIR) + "/" + fixture);
  io::GgufHeader a = io::GgufHeader::read(*ours_file), b = io::GgufHeader::read(*theirs_file);
  expect_same_tensors(a, *ours_file, b, *theirs_file);
  for (const char* key : ints) EXPECT_EQ(a.get_int(key), b.get_int(key)) << key;
  return {std::move(a), std::move(b)};
}

// `checkpoint` written as a Q8_0 file `out`, some matrices in Q8_0: its header.
io::GgufHeader export_q8_0(const std::string& checkpoint, const std::string& out) {
  const llm::GgufExportReport report = llm::export_gguf(checkpoint, out, {.type = GgmlType::Q8_0});
  EXPECT_GT(report.tensors.at(GgmlType::Q8_0), 0);
  auto file = io::open(out);
  return io::GgufHeader::read(*file);
}

// The Q8_0 file `prism quantize` writes holds exactly the blocks of the fixture
// tools/make_tiny_gguf.py writes (llama.cpp's names and Q/K row order, quantized as the gguf
// package does), tensor for tensor.
TEST(GgufExport, Q8_0EqualsTheConvertersFile) {
  test::TempDir dir;
  const std::string out = dir.str("tiny-q8_0.gguf");
  const llm::GgufExportReport report = llm::export_gguf(
      std::string(PRISM_TEST_DATA) + "/llama/tiny-bf16-tied", out,
      {.type = GgmlType::Q8_0, .tokenizer = std::string(PRISM_TOKENIZERS_DIR) + "/llama3_1"});
  EXPECT_TRUE(report.tokenizer);
  const auto [ours, theirs] = expect_like_fixture(
      out, "tiny-bf16-tied-q8_0.gguf",
      {"llama.block_count", "llama.embedding_length", "llama.attention.head_count",
       "llama.attention.head_count_kv", "llama.feed_forward_length", "llama.vocab_size",
       "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "general.file_type"});
  EXPECT_EQ(ours.get_string("tokenizer.chat_template"),
            theirs.get_string("tokenizer.chat_template"));
  EXPECT_EQ(ours.get_array("tokenizer.ggml.tokens").strings(),
            theirs.get_array("tokenizer.ggml.tokens").strings());
  EXPECT_EQ(ours.get_array("tokenizer.ggml.token_type").ints(),
            theirs.get_array("tokenizer.ggml.token_type").ints());
  EXPECT_EQ(ours.get_array("tokenizer.ggml.merges").strings(),
            theirs.get_array("tokenizer.ggml.merges").strings());
}

// LFM 2: the BF16 file `prism quantize` writes holds the converter's tensors (the fixture
// tools/make_tiny_gguf.py writes as llama.cpp's converter does: names, the convolution kernels
// squeezed and kept F32) byte for byte and its lfm2.* hyperparameters, and runs as the
// checkpoint; a Q8_0 one keeps the kernels and norms F32 and quantizes the other matrices.
TEST(GgufExport, Lfm2EqualsTheConvertersFile) {
  test::TempDir dir;
  const std::string checkpoint = std::string(PRISM_TEST_DATA) + "/lfm2/tiny-bf16-tied";
  const std::string out = dir.str("lfm2.gguf");
  llm::export_gguf(checkpoint, out, {.type = GgmlType::BF16});
  const auto [ours, theirs] = expect_like_fixture(
      out, "lfm2-tiny-bf16-tied.gguf",
      {"lfm2.block_count", "lfm2.context_length", "lfm2.embedding_length",
       "lfm2.feed_forward_length", "lfm2.attention.head_count", "lfm2.vocab_size",
       "lfm2.shortconv.l_cache", "general.file_type", "general.quantization_version"});
  EXPECT_EQ(ours.get_array("lfm2.attention.head_count_kv").ints(),
            theirs.get_array("lfm2.attention.head_count_kv").ints());
  EXPECT_EQ(ours.get_string("general.size_label"), theirs.get_string("general.size_label"));

  const auto [got, want] = first_logits(out, checkpoint);
  EXPECT_EQ(got, want);

  const std::string q8 = dir.str("lfm2-q8_0.gguf");
  const io::GgufHeader q8_header = export_q8_0(checkpoint, q8);
  EXPECT_EQ(q8_header.tensor("blk.0.shortconv.conv.weight").type, GgmlType::F32);
  EXPECT_EQ(q8_header.tensor("blk.0.ffn_gate.weight").type, GgmlType::Q8_0);
}

// Qwen 3.5 as the converter writes it (tools/make_tiny_gguf.py's file): every tensor bit for
// bit (norms as w + 1, A_log as -exp(A_log), the value heads in llama.cpp's order, the
// multi-token prediction layer's norm after the model's blocks) and the metadata; the file
// answers as the checkpoint does, and a Q8_0 one keeps its matrices in Q8_0.
TEST(GgufExport, Qwen3_5EqualsTheConvertersFile) {
  test::TempDir dir;
  const std::string checkpoint = std::string(PRISM_TEST_DATA) + "/qwen3_5/tiny-bf16-tied";
  const std::string out = dir.str("qwen3_5.gguf");
  llm::export_gguf(
      checkpoint, out,
      {.type = GgmlType::BF16, .tokenizer = std::string(PRISM_TOKENIZERS_DIR) + "/qwen3"});
  const auto [ours, theirs] = expect_like_fixture(
      out, "qwen3_5-tiny-bf16-tied.gguf",
      {"qwen35.block_count", "qwen35.context_length", "qwen35.embedding_length",
       "qwen35.feed_forward_length", "qwen35.attention.head_count",
       "qwen35.attention.head_count_kv", "qwen35.attention.key_length",
       "qwen35.attention.value_length", "qwen35.nextn_predict_layers", "qwen35.ssm.conv_kernel",
       "qwen35.ssm.state_size", "qwen35.ssm.group_count", "qwen35.ssm.time_step_rank",
       "qwen35.ssm.inner_size", "qwen35.full_attention_interval", "qwen35.rope.dimension_count",
       "general.file_type", "general.quantization_version"});
  for (const char* key : {"qwen35.rope.freq_base", "qwen35.attention.layer_norm_rms_epsilon"}) {
    EXPECT_EQ(ours.get_float(key), theirs.get_float(key)) << key;
  }
  for (const char* key : {"qwen35.rope.dimension_sections", "qwen35.attention.recurrent_layers"}) {
    EXPECT_EQ(ours.get_array(key).to_string(64), theirs.get_array(key).to_string(64)) << key;
  }
  EXPECT_EQ(ours.get_string("general.architecture"), "qwen35");
  EXPECT_EQ(ours.get_string("general.size_label"), theirs.get_string("general.size_label"));
  EXPECT_EQ(ours.get_string("tokenizer.ggml.pre"), theirs.get_string("tokenizer.ggml.pre"));

  const auto [a, b] = first_logits(out, checkpoint);
  ASSERT_EQ(a.size(), b.size());
  // A_log comes back as log(-(-exp(A_log))): equal up to the last bits.
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << i;

  const std::string q8 = dir.str("qwen3_5-q8_0.gguf");
  const io::GgufHeader q8_header = export_q8_0(checkpoint, q8);
  EXPECT_EQ(q8_header.tensor("blk.0.ssm_conv1d.weight").type, GgmlType::F32);
  EXPECT_EQ(q8_header.tensor("blk.0.ssm_a").type, GgmlType::F32);
  EXPECT_EQ(q8_header.tensor("blk.0.ffn_down.weight").type, GgmlType::Q8_0);  // rows of 32
  EXPECT_EQ(q8_header.tensor("blk.0.ssm_out.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(first_logits(q8, checkpoint).first.size(), b.size());
}

}  // namespace
}  // namespace prism::quant
