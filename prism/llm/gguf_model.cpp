#include "prism/llm/gguf_model.h"

#include <utility>
#include <vector>

#include "prism/core/error.h"
#include "prism/models/llama.h"

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
  double number(std::string_view name, double fallback) const {
    return has(name) ? h_.get_float(key(name)) : fallback;
  }
  std::string_view string(std::string_view name) const { return h_.get_string(key(name)); }

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

  void add(const std::string& name, const std::string& gguf_name, std::vector<int64_t> shape,
           std::vector<int64_t> row_order = {}) {
    if (!file_.contains(gguf_name)) {
      fail("llm: {}: no tensor '{}', which {} needs", h_.uri, gguf_name, what_);
    }
    io::StoredTensor t = file_.at(gguf_name);
    if (t.info.shape != shape) {
      fail("llm: {}: tensor '{}' is {}{} but {} needs [{}]", h_.uri, gguf_name, t.type_name(),
           t.info.shape_str(), what_, fmt::join(shape, ", "));
    }
    t.row_order = std::move(row_order);
    tensors_.emplace_back(name, std::move(t));
  }
  io::Store store() && { return io::Store::from_tensors(h_.uri, std::move(tensors_)); }

 private:
  const io::Store& file_;
  const io::GgufHeader& h_;
  std::string what_;
  std::vector<std::pair<std::string, io::StoredTensor>> tensors_;
};

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
  if (m.has("vocab_size")) {
    c.vocab_size = m.positive("vocab_size");
  } else if (const io::GgufValue* tokens = h.find("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int64_t>(tokens->size());
  } else if (file_store.contains("token_embd.weight")) {
    c.vocab_size = file_store.at("token_embd.weight").info.shape.at(0);
  }
  PRISM_CHECK(c.vocab_size > 0, "llm: {}: no llama.vocab_size, tokenizer or token_embd.weight",
              h.uri);
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
  map.add("model.embed_tokens.weight", "token_embd.weight", {c.vocab_size, d});
  map.add("model.norm.weight", "output_norm.weight", {d});
  if (!c.tie_word_embeddings) map.add("lm_head.weight", "output.weight", {c.vocab_size, d});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", l);
    map.add(p + "input_layernorm.weight", b + "attn_norm.weight", {d});
    map.add(p + "self_attn.q_proj.weight", b + "attn_q.weight", {c.num_heads * hd, d},
            rope_rows_from_llama_cpp(c.num_heads, hd));
    map.add(p + "self_attn.k_proj.weight", b + "attn_k.weight", {c.num_kv_heads * hd, d},
            rope_rows_from_llama_cpp(c.num_kv_heads, hd));
    map.add(p + "self_attn.v_proj.weight", b + "attn_v.weight", {c.num_kv_heads * hd, d});
    map.add(p + "self_attn.o_proj.weight", b + "attn_output.weight", {d, c.num_heads * hd});
    map.add(p + "post_attention_layernorm.weight", b + "ffn_norm.weight", {d});
    map.add(p + "mlp.gate_proj.weight", b + "ffn_gate.weight", {f, d});
    map.add(p + "mlp.up_proj.weight", b + "ffn_up.weight", {f, d});
    map.add(p + "mlp.down_proj.weight", b + "ffn_down.weight", {d, f});
  }
  io::Store store = std::move(map).store();
  return {std::make_unique<models::Llama>(std::move(c), dtype), std::move(store),
          std::move(header)};
}

using Opener = GgufModel (*)(std::shared_ptr<io::File>, io::GgufHeader, DType);

struct Architecture {
  const char* name;  // general.architecture
  Opener open;
};

constexpr Architecture kArchitectures[] = {
    {"llama", open_llama},
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
