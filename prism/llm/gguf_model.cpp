#include "prism/llm/gguf_model.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "prism/core/error.h"
#include "prism/llm/gguf_names.h"
#include "prism/models/lfm2.h"
#include "prism/models/llama.h"
#include "prism/models/qwen3_5.h"

namespace prism::llm {
namespace {

// The metadata of one architecture ("llama.block_count", ...), with errors naming the file.
class Metadata {
 public:
  Metadata(const io::GgufHeader& header, std::string arch) : h_(header), arch_(std::move(arch)) {}
  std::string key(std::string_view name) const { return arch_ + "." + std::string(name); }
  bool has(std::string_view name) const { return h_.find(key(name)) != nullptr; }
  int64_t positive(std::string_view name) const {
    const int64_t v = h_.get_int(key(name));
    PRISM_CHECK(v > 0, "llm: {}: {} is {}, not a positive size", h_.uri, key(name), v);
    return v;
  }
  int64_t positive(std::string_view name, int64_t fallback) const {
    return has(name) ? positive(name) : fallback;
  }
  int64_t non_negative(std::string_view name, int64_t fallback) const {
    if (!has(name)) return fallback;
    const int64_t v = h_.get_int(key(name));
    PRISM_CHECK(v >= 0, "llm: {}: {} is {}, not a size", h_.uri, key(name), v);
    return v;
  }
  double number(std::string_view name, double fallback) const {
    return has(name) ? h_.get_float(key(name)) : fallback;
  }
  std::string_view string(std::string_view name) const { return h_.get_string(key(name)); }
  // A size per layer, which llama.cpp states as an array of the layers' (lfm2's
  // attention.head_count_kv, 0 for a convolution layer) or as one for every layer.
  std::vector<int64_t> per_layer(std::string_view name, int64_t layers) const {
    const io::GgufValue& v = h_.at(key(name));
    if (!v.is_array()) return std::vector<int64_t>(layers, h_.get_int(key(name)));
    PRISM_CHECK(static_cast<int64_t>(v.size()) == layers,
                "llm: {}: {} lists {} layers, not the {} of block_count", h_.uri, key(name),
                v.size(), layers);
    std::vector<int64_t> sizes;
    for (size_t i = 0; i < v.size(); ++i) {
      sizes.push_back(v.int_at(i));
      PRISM_CHECK(sizes.back() >= 0, "llm: {}: {}[{}] is {}, not a size", h_.uri, key(name), i,
                  sizes.back());
    }
    return sizes;
  }
  // A flag per layer (qwen35's attention.recurrent_layers), for the first `layers`.
  std::vector<bool> flags(std::string_view name, int64_t layers) const {
    const io::GgufValue& v = h_.get_array(key(name));
    PRISM_CHECK(
        v.element_type() == io::GgufValueType::BOOL && static_cast<int64_t>(v.size()) >= layers,
        "llm: {}: {} must list at least {} layers as BOOL, not {}", h_.uri, key(name), layers,
        v.to_string(4));
    std::vector<bool> out;
    for (int64_t i = 0; i < layers; ++i) out.push_back(v.bool_at(i));
    return out;
  }
  // The kinds of rope scaling llama.cpp states as metadata (linear, yarn, ...) have no
  // counterpart in prism's models, which rotate as their checkpoints' default rope does.
  void refuse_rope_scaling() const {
    if (has("rope.scaling.type") && string("rope.scaling.type") != "none") {
      fail("llm: {}: {} \"{}\" is not supported", h_.uri, key("rope.scaling.type"),
           string("rope.scaling.type"));
    }
  }

 private:
  const io::GgufHeader& h_;
  std::string arch_;
};

// The eos and bos ids llama.cpp's converter records: the end of a text, of a turn (the
// instruction-tuned models' <|eot_id|>) and of a message (<|eom_id|>) all end a generation.
void read_special_ids(const io::GgufHeader& h, std::vector<int64_t>& eos,
                      std::optional<int64_t>& bos) {
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    if (!h.find(key)) continue;
    const int64_t id = h.get_int(key);
    if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  }
  if (h.find("tokenizer.ggml.bos_token_id")) bos = h.get_int("tokenizer.ggml.bos_token_id");
}

// Hugging Face's q_proj / k_proj rows from llama.cpp's: llama.cpp's converter reorders each
// head's rows for its rope, which rotates adjacent pairs (x[2i], x[2i+1]) where Hugging Face
// rotates the two halves (x[i], x[i + head_dim/2]): Hugging Face's row j*half + i of a head is
// stored as row 2i + j. Returns, for each Hugging Face row, the stored row.
std::vector<int64_t> rope_rows_from_llama_cpp(int64_t heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<int64_t> stored(heads * head_dim);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t i = 0; i < half; ++i)
        stored[h * head_dim + j * half + i] = h * head_dim + 2 * i + j;
    }
  }
  return stored;
}

// Collects the model's tensors from the file: each under the model's name, checked to have the
// sizes the metadata implies.
class TensorMap {
 public:
  TensorMap(const io::Store& file_store, const io::GgufHeader& header, std::string what)
      : file_(file_store), h_(header), what_(std::move(what)) {}

  // The file's tensor `gguf_name`, of `shape` in the file, as the model's `name`; returned for
  // the caller to say how else it differs from the model's (column order, values, the model's
  // dims where the file leaves out one of size 1), before the next add.
  io::StoredTensor& add(const std::string& name, const std::string& gguf_name,
                        std::vector<int64_t> shape, std::vector<int64_t> row_order = {}) {
    if (!file_.contains(gguf_name)) {
      fail("llm: {}: no tensor '{}', which {} needs", h_.uri, gguf_name, what_);
    }
    io::StoredTensor t = file_.at(gguf_name);
    if (t.info.shape != shape) {
      fail("llm: {}: tensor '{}' is {}{} but {} needs [{}]", h_.uri, gguf_name, t.type_name(),
           t.info.shape_str(), what_, fmt::join(shape, ", "));
    }
    t.row_order = std::move(row_order);
    return tensors_.emplace_back(name, std::move(t)).second;
  }
  io::Store store() && { return io::Store::from_tensors(h_.uri, std::move(tensors_)); }

 private:
  const io::Store& file_;
  const io::GgufHeader& h_;
  std::string what_;
  std::vector<std::pair<std::string, io::StoredTensor>> tensors_;
};

// The vocabulary: ARCH.vocab_size, else the tokenizer's tokens, else the embedding's rows.
int64_t vocab_size(const Metadata& m, const io::GgufHeader& h, const io::Store& file_store) {
  int64_t n = 0;
  if (m.has("vocab_size")) {
    n = m.positive("vocab_size");
  } else if (const io::GgufValue* tokens = h.find("tokenizer.ggml.tokens")) {
    n = static_cast<int64_t>(tokens->size());
  } else if (file_store.contains("token_embd.weight")) {
    n = file_store.at("token_embd.weight").info.shape.at(0);
  }
  PRISM_CHECK(n > 0, "llm: {}: no {}, tokenizer or token_embd.weight", h.uri, m.key("vocab_size"));
  return n;
}

GgufModel open_llama(std::shared_ptr<io::File> file, io::GgufHeader header, DType dtype) {
  const io::GgufHeader& h = header;
  const Metadata m(h, "llama");
  models::LlamaConfig c;
  c.num_layers = m.positive("block_count");
  c.hidden_size = m.positive("embedding_length");
  c.intermediate_size = m.positive("feed_forward_length");
  c.num_heads = m.positive("attention.head_count");
  c.num_kv_heads = m.positive("attention.head_count_kv", c.num_heads);
  c.head_dim = m.positive("attention.key_length", c.hidden_size / c.num_heads);
  c.max_positions = m.positive("context_length");
  c.rope_theta = m.number("rope.freq_base", 10000);
  c.rms_norm_eps = m.number("attention.layer_norm_rms_epsilon", 1e-5);
  const io::Store file_store = io::Store::from_gguf(file, h);
  c.vocab_size = vocab_size(m, h, file_store);
  PRISM_CHECK(c.num_heads % c.num_kv_heads == 0 && c.head_dim % 2 == 0,
              "llm: {}: {} attention heads of {} are not a multiple of {} key/value heads of an "
              "even size",
              h.uri, c.num_heads, c.head_dim, c.num_kv_heads);
  // prism's Llama rotates whole heads, as Llama's checkpoints do.
  PRISM_CHECK(m.positive("rope.dimension_count", c.head_dim) == c.head_dim,
              "llm: {}: llama.rope.dimension_count {} is not the head size {}; partial rotary "
              "embeddings are not supported for llama",
              h.uri, m.positive("rope.dimension_count", c.head_dim), c.head_dim);
  PRISM_CHECK(m.positive("attention.value_length", c.head_dim) == c.head_dim,
              "llm: {}: llama.attention.value_length {} differs from key_length {}", h.uri,
              m.positive("attention.value_length", c.head_dim), c.head_dim);
  // Llama 3.1's scaling arrives as the rope_freqs tensor (below); the kinds llama.cpp states as
  // metadata (linear, yarn) have no counterpart in prism's Llama.
  if (m.has("rope.scaling.type") && m.string("rope.scaling.type") != "none") {
    fail("llm: {}: llama.rope.scaling.type \"{}\" is not supported (llama3's, as rope_freqs, is)",
         h.uri, m.string("rope.scaling.type"));
  }
  if (const io::GgufTensor* freqs = h.find_tensor("rope_freqs.weight")) {
    PRISM_CHECK(freqs->numel() == c.head_dim / 2,
                "llm: {}: rope_freqs.weight has {} factors, a head of {} needs {}", h.uri,
                freqs->numel(), c.head_dim, c.head_dim / 2);
    for (float f : h.read_f32(*file, *freqs)) c.rope_freq_factors.push_back(f);
  }
  c.tie_word_embeddings = !file_store.contains("output.weight");
  read_special_ids(h, c.eos_token_ids, c.bos_token_id);

  const int64_t d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim;
  TensorMap map(
      file_store, h,
      fmt::format("a llama of {} blocks, width {}, {}/{} heads of {}, MLP {}, vocabulary {}",
                  c.num_layers, d, c.num_heads, c.num_kv_heads, hd, f, c.vocab_size));
  for (const GgufTensorName& t : llama_gguf_names(c)) {
    std::vector<int64_t> rows;
    if (t.rope_heads > 0) rows = rope_rows_from_llama_cpp(t.rope_heads, hd);
    map.add(t.hf, t.gguf, t.shape, std::move(rows));
  }
  io::Store store = std::move(map).store();
  return {std::make_unique<models::Llama>(std::move(c), dtype), std::move(store),
          std::move(header)};
}

// LFM 2 (llama.cpp's "lfm2"): convolution layers are those with no key/value heads in
// lfm2.attention.head_count_kv. The converter renames the tensors, squeezes the convolution's
// kernels from [d, 1, taps] to [d, taps] and keeps the rest as Hugging Face's (its rope rotates
// halves, as Hugging Face's does, so q and k keep their rows).
GgufModel open_lfm2(std::shared_ptr<io::File> file, io::GgufHeader header, DType dtype) {
  const io::GgufHeader& h = header;
  const Metadata m(h, "lfm2");
  models::Lfm2Config c;
  const int64_t layers = m.positive("block_count");
  c.hidden_size = m.positive("embedding_length");
  c.intermediate_size = m.positive("feed_forward_length");  // after block_auto_adjust_ff_dim
  c.num_heads = m.positive("attention.head_count");
  c.head_dim = m.positive("attention.key_length", c.hidden_size / c.num_heads);
  c.max_positions = m.positive("context_length");
  c.conv_kernel = m.positive("shortconv.l_cache");
  c.rope_theta = m.number("rope.freq_base", c.rope_theta);
  c.norm_eps = m.number("attention.layer_norm_rms_epsilon", c.norm_eps);
  for (int64_t kv : m.per_layer("attention.head_count_kv", layers)) {
    c.layers.push_back(kv == 0 ? models::Lfm2Config::Layer::conv
                               : models::Lfm2Config::Layer::attention);
    if (kv == 0) continue;
    PRISM_CHECK(c.num_kv_heads == 0 || c.num_kv_heads == kv,
                "llm: {}: lfm2.attention.head_count_kv gives attention layers {} and {} "
                "key/value heads; one number for all is supported",
                h.uri, c.num_kv_heads, kv);
    c.num_kv_heads = kv;
  }
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;  // no attention layer
  PRISM_CHECK(c.num_heads % c.num_kv_heads == 0 && c.head_dim % 2 == 0 && c.conv_kernel >= 2,
              "llm: {}: {} attention heads of {} are not a multiple of {} key/value heads of an "
              "even size, or the convolution's {} taps are fewer than 2",
              h.uri, c.num_heads, c.head_dim, c.num_kv_heads, c.conv_kernel);
  PRISM_CHECK(m.positive("attention.value_length", c.head_dim) == c.head_dim,
              "llm: {}: lfm2.attention.value_length {} differs from key_length {}", h.uri,
              m.positive("attention.value_length", c.head_dim), c.head_dim);
  PRISM_CHECK(m.non_negative("attention.sliding_window", 0) == 0,
              "llm: {}: lfm2.attention.sliding_window {} is not supported (prism's LFM 2 attends "
              "to the whole context)",
              h.uri, m.non_negative("attention.sliding_window", 0));
  m.refuse_rope_scaling();
  const io::Store file_store = io::Store::from_gguf(file, h);
  c.vocab_size = vocab_size(m, h, file_store);
  c.tie_word_embeddings = !file_store.contains("output.weight");
  const auto first_conv =
      std::find(c.layers.begin(), c.layers.end(), models::Lfm2Config::Layer::conv);
  c.conv_bias = first_conv != c.layers.end() &&
                file_store.contains(
                    fmt::format("blk.{}.shortconv.in_proj.bias", first_conv - c.layers.begin()));
  read_special_ids(h, c.eos_token_ids, c.bos_token_id);

  const int64_t d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim;
  TensorMap map(file_store, h,
                fmt::format("an lfm2 of {} blocks ({} attention), width {}, {}/{} heads of {}, "
                            "MLP {}, vocabulary {}",
                            layers,
                            std::count(c.layers.begin(), c.layers.end(),
                                       models::Lfm2Config::Layer::attention),
                            d, c.num_heads, c.num_kv_heads, hd, f, c.vocab_size));
  for (const GgufTensorName& t : lfm2_gguf_names(c)) {
    io::StoredTensor& stored = map.add(t.hf, t.gguf, t.shape);
    if (!t.hf_shape.empty()) stored.info.shape = t.hf_shape;
  }
  io::Store store = std::move(map).store();
  return {std::make_unique<models::Lfm2>(std::move(c), dtype), std::move(store), std::move(header)};
}

// Qwen 3.5 (llama.cpp's "qwen35"), the dense text models: the tensors as qwen35_gguf_names
// says the converter stores them (norms as w + 1, A_log as -exp(A_log), the value heads in
// llama.cpp's order...), all of which is undone as the tensors load. Its block_count counts
// the multi-token prediction layers (nextn_predict_layers) after the model's: a head of one
// layer is the model's draft head (--speculate=mtp).
GgufModel open_qwen35(std::shared_ptr<io::File> file, io::GgufHeader header, DType dtype) {
  const io::GgufHeader& h = header;
  const Metadata m(h, "qwen35");
  models::Qwen3_5Config c;
  const int64_t blocks = m.positive("block_count");
  const int64_t layers = blocks - m.non_negative("nextn_predict_layers", 0);
  PRISM_CHECK(layers > 0, "llm: {}: qwen35.nextn_predict_layers {} leaves none of the {} blocks",
              h.uri, blocks - layers, blocks);
  c.prefix = "model.";
  c.hidden_size = m.positive("embedding_length");
  c.intermediate_size = m.positive("feed_forward_length");
  c.num_heads = m.positive("attention.head_count");
  c.num_kv_heads = m.positive("attention.head_count_kv", c.num_heads);
  c.head_dim = m.positive("attention.key_length", c.hidden_size / c.num_heads);
  c.rotary_dim = m.positive("rope.dimension_count");
  c.rope_theta = m.number("rope.freq_base", c.rope_theta);
  c.linear_key_heads = m.positive("ssm.group_count");
  c.linear_value_heads = m.positive("ssm.time_step_rank");
  c.linear_key_dim = m.positive("ssm.state_size");
  c.conv_kernel = m.positive("ssm.conv_kernel");
  c.rms_norm_eps = m.number("attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  c.max_positions = m.positive("context_length");
  const int64_t inner = m.positive("ssm.inner_size");
  PRISM_CHECK(inner % c.linear_value_heads == 0,
              "llm: {}: qwen35.ssm.inner_size {} is not {} value heads (ssm.time_step_rank) of "
              "one size",
              h.uri, inner, c.linear_value_heads);
  c.linear_value_dim = inner / c.linear_value_heads;
  // The layer kinds: attention.recurrent_layers, else every full_attention_interval-th layer
  // is full attention (as llama.cpp reads them).
  if (m.has("attention.recurrent_layers")) {
    for (bool recurrent : m.flags("attention.recurrent_layers", layers)) {
      c.layers.push_back(recurrent ? models::Qwen3_5Config::Layer::linear_attention
                                   : models::Qwen3_5Config::Layer::full_attention);
    }
  } else {
    const int64_t interval = m.positive("full_attention_interval", 4);
    for (int64_t i = 0; i < layers; ++i) {
      c.layers.push_back((i + 1) % interval ? models::Qwen3_5Config::Layer::linear_attention
                                            : models::Qwen3_5Config::Layer::full_attention);
    }
  }
  PRISM_CHECK(c.num_heads % c.num_kv_heads == 0 && c.linear_value_heads % c.linear_key_heads == 0,
              "llm: {}: {} attention heads are not a multiple of {} key/value heads, or {} "
              "linear-attention value heads of {} key heads",
              h.uri, c.num_heads, c.num_kv_heads, c.linear_value_heads, c.linear_key_heads);
  PRISM_CHECK(c.rotary_dim % 2 == 0 && c.rotary_dim <= c.head_dim && c.conv_kernel >= 2,
              "llm: {}: qwen35.rope.dimension_count {} must be even and at most the head size {}, "
              "and ssm.conv_kernel {} at least 2",
              h.uri, c.rotary_dim, c.head_dim, c.conv_kernel);
  PRISM_CHECK(m.positive("attention.value_length", c.head_dim) == c.head_dim,
              "llm: {}: qwen35.attention.value_length {} differs from key_length {}", h.uri,
              m.positive("attention.value_length", c.head_dim), c.head_dim);
  m.refuse_rope_scaling();
  const io::Store file_store = io::Store::from_gguf(file, h);
  c.vocab_size = vocab_size(m, h, file_store);
  c.tie_word_embeddings = !file_store.contains("output.weight");
  read_special_ids(h, c.eos_token_ids, c.bos_token_id);

  const int64_t d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim;
  const int64_t nk = c.linear_key_heads, nv = c.linear_value_heads;
  TensorMap map(file_store, h,
                fmt::format("a qwen35 of {} blocks, width {}, {}/{} heads of {}, {}/{} linear "
                            "heads of {}/{}, MLP {}, vocabulary {}",
                            layers, d, c.num_heads, c.num_kv_heads, hd, nk, nv, c.linear_key_dim,
                            c.linear_value_dim, f, c.vocab_size));
  // The multi-token prediction head where the file has the whole of one of one layer (the
  // converter's nextn block after the model's), for --speculate=mtp; a plain run does not
  // read it, and runs whatever the file holds of it.
  std::vector<GgufTensorName> names = qwen35_gguf_names(c);
  std::vector<GgufTensorName> head = qwen35_mtp_gguf_names(c, 1);
  if (blocks - layers == 1 && std::all_of(head.begin(), head.end(), [&](const GgufTensorName& t) {
        return file_store.contains(t.gguf);
      })) {
    c.mtp_layers = 1;
    for (GgufTensorName& t : head) names.push_back(std::move(t));
  }
  for (const GgufTensorName& t : names) {
    io::StoredTensor& stored = map.add(t.hf, t.gguf, t.shape, t.row_order);
    stored.column_order = t.column_order;
    stored.stored_as = t.stored_as;
    if (!t.hf_shape.empty()) stored.info.shape = t.hf_shape;
  }
  io::Store store = std::move(map).store();
  return {std::make_unique<models::Qwen3_5>(std::move(c), dtype), std::move(store),
          std::move(header)};
}

using Opener = GgufModel (*)(std::shared_ptr<io::File>, io::GgufHeader, DType);

struct Architecture {
  const char* name;  // general.architecture
  Opener open;
};

constexpr Architecture kArchitectures[] = {
    {"llama", open_llama},
    {"lfm2", open_lfm2},
    {"qwen35", open_qwen35},
};

}  // namespace

bool is_gguf_uri(std::string_view uri) { return uri.ends_with(".gguf"); }

GgufModel open_gguf_model(const std::string& uri, DType dtype) {
  std::shared_ptr<io::File> file = io::open(uri);
  io::GgufHeader header = io::GgufHeader::read(*file);
  return open_gguf_model(std::move(file), std::move(header), dtype);
}

GgufModel open_gguf_model(std::shared_ptr<io::File> file, io::GgufHeader header, DType dtype) {
  const std::string_view arch = header.find("general.architecture")
                                    ? header.get_string("general.architecture")
                                    : std::string_view("(none)");
  std::vector<std::string_view> known;
  for (const Architecture& a : kArchitectures) {
    if (arch == a.name) return a.open(std::move(file), std::move(header), dtype);
    known.push_back(a.name);
  }
  fail("llm: {}: general.architecture \"{}\" is not supported in GGUF files (supported: {})",
       header.uri, arch, fmt::join(known, ", "));
}

}  // namespace prism::llm
