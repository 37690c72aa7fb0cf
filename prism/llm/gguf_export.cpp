#include "prism/llm/gguf_export.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <tuple>
#include <vector>

#include "prism/core/error.h"
#include "prism/core/host_buffer.h"
#include "prism/io/gguf_writer.h"
#include "prism/io/store.h"
#include "prism/io/vfs.h"
#include "prism/llm/gguf_names.h"
#include "prism/llm/tokenizer.h"
#include "prism/models/lfm2.h"
#include "prism/models/llama.h"
#include "prism/models/qwen3_5.h"
#include "prism/quant/quantize.h"

namespace prism::llm {
namespace {

using nlohmann::json;
using quant::GgmlType;

// Rows are converted and quantized this many f32 bytes at a time.
constexpr uint64_t kChunkBytes = 16ull << 20;

json read_json(const std::string& uri) {
  const std::string text = io::read_text(uri);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", uri, e.what());
  }
}

std::string last_component(std::string_view uri) {
  while (uri.ends_with('/')) uri.remove_suffix(1);
  const size_t slash = uri.rfind('/');
  return std::string(slash == std::string_view::npos ? uri : uri.substr(slash + 1));
}

// One tensor of the GGUF file: where it comes from in the checkpoint and how its rows move.
struct Source {
  std::string gguf_name;
  std::string hf_name;           // empty for a tensor computed here (rope_freqs)
  std::vector<int64_t> shape;    // outermost first
  int64_t rope_heads = 0;        // > 0: q or k, rows reordered per head for llama.cpp's rope
  int64_t head_dim = 0;          // of those heads
  std::vector<float> values;     // a computed tensor's values
  std::optional<GgmlType> type;  // forced: F32 where the converter keeps a matrix so
  // The file's row r (element c of a row) is the checkpoint's row rows[r] (element
  // columns[c]); empty where they agree. And the values as the file stores them.
  std::vector<int64_t> rows, columns;
  io::StoredTensor::Stored stored_as = io::StoredTensor::Stored::as_is;
};

// The inverse of a permutation given as "position i goes to order[i]" (GgufTensorName's row
// and column orders): for each position of the result, where it comes from.
std::vector<int64_t> sources_of(const std::vector<int64_t>& order) {
  std::vector<int64_t> from(order.size());
  for (size_t i = 0; i < order.size(); ++i) from[order[i]] = static_cast<int64_t>(i);
  return from;
}

// The tensors of a GGUF file being planned, each checked against the checkpoint as it is
// added, before anything is written.
class Plan {
 public:
  Plan(const io::Store& store, std::string checkpoint) : store_(store), checkpoint_(checkpoint) {}
  // `what` names the model in errors: "a llama of 2 layers, ...".
  void describe(std::string what) { what_ = std::move(what); }
  // The checkpoint's `hf_name`, of `hf_shape` (default: `shape`), as `gguf_name` of `shape`.
  Source& add(std::string gguf_name, std::string hf_name, std::vector<int64_t> shape,
              std::vector<int64_t> hf_shape = {}) {
    if (hf_shape.empty()) hf_shape = shape;
    if (!store_.contains(hf_name)) {
      fail("quantize: {}: no tensor '{}', which {} needs", checkpoint_, hf_name, what_);
    }
    const io::StoredTensor& t = store_.at(hf_name);
    if (t.info.shape != hf_shape) {
      fail("quantize: {}: tensor '{}' is {}{} but {} needs [{}]", checkpoint_, hf_name,
           t.type_name(), t.info.shape_str(), what_, fmt::join(hf_shape, ", "));
    }
    if (!io::to_core_dtype(t.info.dtype) || !is_float(*io::to_core_dtype(t.info.dtype))) {
      fail("quantize: {}: tensor '{}' is {}, not floating point", checkpoint_, hf_name,
           t.type_name());
    }
    sources.push_back({std::move(gguf_name), std::move(hf_name), std::move(shape), 0, 0, {}, {}});
    return sources.back();
  }
  std::vector<Source> sources;
  const io::Store& store() const { return store_; }

 private:
  const io::Store& store_;
  std::string checkpoint_, what_;
};

// llama.cpp's rope rotates adjacent pairs (x[2i], x[2i+1]) where Hugging Face's rotates the
// halves (x[i], x[i + head_dim/2]), so its converter stores Hugging Face row j * half + i of
// each head as row 2i + j. Returns the Hugging Face row of GGUF row r.
int64_t hf_row_of(int64_t r, int64_t head_dim) {
  const int64_t head = r / head_dim, within = r % head_dim, half = head_dim / 2;
  return head * head_dim + (within % 2) * half + within / 2;
}

// rope_freqs: the factor each rotary frequency is divided by under Llama 3.1's scaling, as
// llama.cpp's converter computes them from the frequencies in f32.
std::vector<float> llama3_rope_factors(const models::LlamaConfig& c) {
  const models::LlamaConfig::Llama3Scaling& s = *c.rope_scaling;
  models::LlamaConfig plain = c;
  plain.rope_scaling.reset();
  const double original = static_cast<double>(s.original_max_positions);
  const double low_wavelen = original / s.low_freq_factor;
  const double high_wavelen = original / s.high_freq_factor;
  std::vector<float> factors;
  for (double freq : plain.rope_inv_freq()) {
    const double wavelen = 2 * std::numbers::pi / freq;
    if (wavelen < high_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      factors.push_back(static_cast<float>(s.factor));
    } else {
      const double smooth =
          (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      factors.push_back(static_cast<float>(1 / ((1 - smooth) / s.factor + smooth)));
    }
  }
  return factors;
}

// The text of a tokenizer_config.json special token: a string or {"content": ...}.
std::optional<std::string> token_text(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return std::nullopt;
}

// Whether the post-processor puts `token` before a text (Hugging Face's TemplateProcessing
// with it first in `single`): what llama.cpp's tokenizer.ggml.add_bos_token records.
bool template_adds(const json& post_processor, const std::string& token) {
  if (!post_processor.is_object()) return false;
  if (post_processor.value("type", "") == "Sequence") {
    for (const json& p : post_processor.value("processors", json::array())) {
      if (template_adds(p, token)) return true;
    }
    return false;
  }
  const json single = post_processor.value("single", json::array());
  return post_processor.value("type", "") == "TemplateProcessing" && !single.empty() &&
         single[0].contains("SpecialToken") && single[0]["SpecialToken"].value("id", "") == token;
}

// The tokenizer section llama.cpp's converter writes for a byte-level BPE tokenizer: every
// token by id (ids the vocabulary leaves out as unused "[PADn]" up to the model's vocabulary),
// added special tokens typed control and other added tokens user-defined, the merges as "a b",
// the bos and eos ids, and the chat template.
void write_tokenizer(io::GgufWriter& w, const std::string& dir, int64_t vocab_size) {
  const std::string tokenizer_uri = io::join(dir, "tokenizer.json");
  const json tok = read_json(tokenizer_uri);
  const std::string config_uri = io::join(dir, "tokenizer_config.json");
  const json config = io::exists(config_uri) ? read_json(config_uri) : json::object();
  const json& model = tok.at("model");
  if (model.value("type", "") != "BPE") {
    fail("quantize: {}: a {} tokenizer; only byte-level BPE (gpt2 in GGUF) is written yet",
         tokenizer_uri, model.value("type", "(untyped)"));
  }
  const std::optional<std::string_view> pre = Tokenizer::gguf_pre_tokenizer(
      tok.value("pre_tokenizer", json()), model.value("ignore_merges", false));
  if (!pre) {
    fail(
        "quantize: {}: its pre-tokenizer is not one GGUF names (llama-bpe, lfm2, qwen2 and "
        "qwen35 are)",
        tokenizer_uri);
  }

  enum : int32_t { kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5 };
  std::vector<std::optional<std::string>> by_id;
  std::vector<int32_t> types;
  auto place = [&](int64_t id, std::string text, int32_t type) {
    PRISM_CHECK(id >= 0 && id < (1 << 24), "quantize: {}: token id {} is out of range",
                tokenizer_uri, id);
    if (static_cast<size_t>(id) >= by_id.size()) {
      by_id.resize(id + 1);
      types.resize(id + 1, kUnused);
    }
    by_id[id] = std::move(text);
    types[id] = type;
  };
  for (const auto& [text, id] : model.at("vocab").items()) place(id.get<int64_t>(), text, kNormal);
  for (const json& t : tok.value("added_tokens", json::array())) {
    place(t.at("id").get<int64_t>(), t.at("content").get<std::string>(),
          t.value("special", false) ? kControl : kUserDefined);
  }
  PRISM_CHECK(static_cast<int64_t>(by_id.size()) <= vocab_size,
              "quantize: {} has {} tokens, more than the model's vocabulary of {}", tokenizer_uri,
              by_id.size(), vocab_size);
  by_id.resize(vocab_size);
  types.resize(vocab_size, kUnused);
  std::vector<std::string> tokens(vocab_size);
  for (int64_t i = 0; i < vocab_size; ++i) {
    tokens[i] = by_id[i] ? std::move(*by_id[i]) : fmt::format("[PAD{}]", i);
  }
  std::vector<std::string> merges;
  for (const json& m : model.value("merges", json::array())) {
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  }
  auto id_of = [&](const std::string& text) -> std::optional<uint32_t> {
    for (int64_t i = 0; i < vocab_size; ++i) {
      if (tokens[i] == text) return static_cast<uint32_t>(i);
    }
    return std::nullopt;
  };

  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", *pre);
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", merges);
  const std::optional<std::string> bos = token_text(config, "bos_token");
  const std::optional<std::string> eos = token_text(config, "eos_token");
  if (bos) {
    if (auto id = id_of(*bos)) w.set_u32("tokenizer.ggml.bos_token_id", *id);
  }
  if (eos) {
    if (auto id = id_of(*eos)) w.set_u32("tokenizer.ggml.eos_token_id", *id);
  }
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
    w.set_bool("tokenizer.ggml.add_bos_token", config["add_bos_token"].get<bool>());
  } else if (bos) {
    w.set_bool("tokenizer.ggml.add_bos_token",
               template_adds(tok.value("post_processor", json()), *bos));
  }
  std::string chat_template;
  if (config.contains("chat_template") && config["chat_template"].is_string()) {
    chat_template = config["chat_template"].get<std::string>();
  } else if (const std::string jinja = io::join(dir, "chat_template.jinja"); io::exists(jinja)) {
    chat_template = io::read_text(jinja);
  }
  if (!chat_template.empty()) w.set_string("tokenizer.chat_template", chat_template);
}

}  // namespace

uint32_t llama_file_type(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return 0;  // LLAMA_FTYPE_ALL_F32
    case GgmlType::F16:
      return 1;  // MOSTLY_F16
    case GgmlType::Q4_0:
      return 2;  // MOSTLY_Q4_0
    case GgmlType::Q8_0:
      return 7;  // MOSTLY_Q8_0
    case GgmlType::Q4_K:
      return 14;  // MOSTLY_Q4_K_S: Q4_K throughout (Q4_K_M mixes in Q6_K)
    case GgmlType::BF16:
      return 32;  // MOSTLY_BF16
    default:
      fail("quantize: no llama.cpp file type for {}", quant::name(type));
  }
}

namespace {

// general.size_label as the converter writes it: the parameters counted, e.g. "2.2M" (two
// significant digits for small numbers, none past the decimal point from 100 on).
std::string size_label(const std::vector<Source>& sources) {
  double count = 0;
  for (const Source& s : sources) {
    double n = 1;
    for (int64_t d : s.shape) n *= static_cast<double>(d);
    count += n;
  }
  double scale = 1e-3;
  const char* suffix = "K";
  for (auto [limit, s, x] :
       {std::tuple{1e12, 1e-12, "T"}, std::tuple{1e9, 1e-9, "B"}, std::tuple{1e6, 1e-6, "M"}}) {
    if (count > limit) {
      scale = s;
      suffix = x;
      break;
    }
  }
  const double scaled = count * scale;
  const std::string whole = fmt::format("{}", static_cast<int64_t>(std::llround(scaled)));
  const int digits = whole == "0" ? 0 : static_cast<int>(whole.size());
  return fmt::format("{:.{}f}{}", scaled, std::max(2 - digits, 0), suffix);
}

// Llama: llama.cpp's names, q and k rows in its rope's order, Llama 3.1's scaling as
// rope_freqs. Returns the vocabulary's size.
int64_t plan_llama(const json& config, const std::string& config_uri, io::GgufWriter& w,
                   Plan& plan) {
  const models::LlamaConfig c = models::LlamaConfig::parse(config, config_uri);
  w.set_u32("llama.vocab_size", static_cast<uint32_t>(c.vocab_size));
  w.set_u32("llama.context_length", static_cast<uint32_t>(c.max_positions));
  w.set_u32("llama.embedding_length", static_cast<uint32_t>(c.hidden_size));
  w.set_u32("llama.block_count", static_cast<uint32_t>(c.num_layers));
  w.set_u32("llama.feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  w.set_u32("llama.attention.head_count", static_cast<uint32_t>(c.num_heads));
  w.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.num_kv_heads));
  w.set_f32("llama.rope.freq_base", static_cast<float>(c.rope_theta));
  w.set_f32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  w.set_u32("llama.rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  w.set_u32("llama.attention.key_length", static_cast<uint32_t>(c.head_dim));
  w.set_u32("llama.attention.value_length", static_cast<uint32_t>(c.head_dim));

  // The tensors, in the order llama.cpp's converter writes them.
  const int64_t d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim;
  plan.describe(
      fmt::format("a llama of {} layers, width {}, {}/{} heads of {}, MLP {}, "
                  "vocabulary {}",
                  c.num_layers, d, c.num_heads, c.num_kv_heads, hd, f, c.vocab_size));
  for (const GgufTensorName& t : llama_gguf_names(c)) {
    Source& s = plan.add(t.gguf, t.hf, t.shape);
    s.rope_heads = t.rope_heads;
    s.head_dim = hd;
    if (t.gguf == "token_embd.weight" && c.rope_scaling) {  // rope_freqs follows, computed
      std::vector<float> factors = llama3_rope_factors(c);
      const auto n = static_cast<int64_t>(factors.size());
      plan.sources.push_back({"rope_freqs.weight", "", {n}, 0, 0, std::move(factors), {}});
    }
  }
  return c.vocab_size;
}

// LFM 2: llama.cpp's "lfm2" (what gguf_model.cpp's open_lfm2 reads back): the tensors renamed,
// the convolution's kernels [d, 1, taps] as [d, taps] in F32, as the converter keeps them; the
// key/value heads of each layer, 0 for a convolution layer. Returns the vocabulary's size.
int64_t plan_lfm2(const json& config, const std::string& config_uri, io::GgufWriter& w,
                  Plan& plan) {
  const models::Lfm2Config c = models::Lfm2Config::parse(config, config_uri);
  const int64_t d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim;
  std::vector<int32_t> kv_heads;
  for (models::Lfm2Config::Layer layer : c.layers) {
    kv_heads.push_back(
        layer == models::Lfm2Config::Layer::conv ? 0 : static_cast<int32_t>(c.num_kv_heads));
  }
  w.set_u32("lfm2.block_count", static_cast<uint32_t>(c.num_layers()));
  w.set_u32("lfm2.context_length", static_cast<uint32_t>(c.max_positions));
  w.set_u32("lfm2.embedding_length", static_cast<uint32_t>(d));
  w.set_u32("lfm2.feed_forward_length", static_cast<uint32_t>(f));
  w.set_u32("lfm2.attention.head_count", static_cast<uint32_t>(c.num_heads));
  w.set_i32s("lfm2.attention.head_count_kv", kv_heads);
  w.set_f32("lfm2.rope.freq_base", static_cast<float>(c.rope_theta));
  w.set_f32("lfm2.attention.layer_norm_rms_epsilon", static_cast<float>(c.norm_eps));
  w.set_u32("lfm2.vocab_size", static_cast<uint32_t>(c.vocab_size));
  w.set_u32("lfm2.shortconv.l_cache", static_cast<uint32_t>(c.conv_kernel));

  plan.describe(
      fmt::format("an lfm2 of {} blocks, width {}, {}/{} heads of {}, MLP {}, "
                  "vocabulary {}",
                  c.num_layers(), d, c.num_heads, c.num_kv_heads, hd, f, c.vocab_size));
  for (const GgufTensorName& t : lfm2_gguf_names(c)) {
    Source& s = plan.add(t.gguf, t.hf, t.shape, t.hf_shape);
    if (t.f32) s.type = GgmlType::F32;
  }
  return c.vocab_size;
}

// Qwen 3.5: llama.cpp's "qwen35" (what gguf_model.cpp's open_qwen35 reads back), the model's
// tensors as qwen35_gguf_names says, then the multi-token prediction layers' that the
// checkpoint holds (block_count counts them, nextn_predict_layers says how many), and the
// metadata the converter writes. Returns the vocabulary's size.
int64_t plan_qwen35(const json& config, const std::string& config_uri, io::GgufWriter& w,
                    Plan& plan) {
  const models::Qwen3_5Config c = models::Qwen3_5Config::parse(config, config_uri);
  const json& text = config.contains("text_config") ? config["text_config"] : config;
  const int64_t layers = static_cast<int64_t>(c.layers.size());
  const int64_t mtp = text.value("mtp_num_hidden_layers", int64_t{0});
  const json rope = text.value("rope_parameters", json::object());
  std::vector<int32_t> sections(4, 0);
  if (rope.contains("mrope_section") && rope["mrope_section"].is_array()) {
    const json& given = rope["mrope_section"];
    for (size_t i = 0; i < given.size() && i < sections.size(); ++i) {
      sections[i] = given[i].get<int32_t>();
    }
  }
  std::vector<bool> recurrent;
  for (models::Qwen3_5Config::Layer layer : c.layers) {
    recurrent.push_back(layer == models::Qwen3_5Config::Layer::linear_attention);
  }
  recurrent.resize(layers + mtp, false);
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  w.set_u32("qwen35.block_count", u32(layers + mtp));
  w.set_u32("qwen35.context_length", u32(c.max_positions));
  w.set_u32("qwen35.embedding_length", u32(c.hidden_size));
  w.set_u32("qwen35.feed_forward_length", u32(c.intermediate_size));
  w.set_u32("qwen35.attention.head_count", u32(c.num_heads));
  w.set_u32("qwen35.attention.head_count_kv", u32(c.num_kv_heads));
  w.set_i32s("qwen35.rope.dimension_sections", sections);
  w.set_f32("qwen35.rope.freq_base", static_cast<float>(c.rope_theta));
  w.set_f32("qwen35.attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  w.set_u32("qwen35.attention.key_length", u32(c.head_dim));
  w.set_u32("qwen35.attention.value_length", u32(c.head_dim));
  if (mtp > 0) w.set_u32("qwen35.nextn_predict_layers", u32(mtp));
  w.set_u32("qwen35.ssm.conv_kernel", u32(c.conv_kernel));
  w.set_u32("qwen35.ssm.state_size", u32(c.linear_key_dim));
  w.set_u32("qwen35.ssm.group_count", u32(c.linear_key_heads));
  w.set_u32("qwen35.ssm.time_step_rank", u32(c.linear_value_heads));
  w.set_u32("qwen35.ssm.inner_size", u32(c.linear_value_heads * c.linear_value_dim));
  w.set_bools("qwen35.attention.recurrent_layers", recurrent);
  w.set_u32("qwen35.full_attention_interval", u32(text.value("full_attention_interval", 4)));
  w.set_u32("qwen35.rope.dimension_count", u32(c.rotary_dim));

  plan.describe(fmt::format(
      "a qwen35 of {} layers, width {}, {}/{} heads of {}, {}/{} linear heads of {}/{}, MLP {}, "
      "vocabulary {}",
      layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.linear_key_heads,
      c.linear_value_heads, c.linear_key_dim, c.linear_value_dim, c.intermediate_size,
      c.vocab_size));
  std::vector<GgufTensorName> names = qwen35_gguf_names(c);
  for (GgufTensorName& t : qwen35_mtp_gguf_names(c, plan.store())) names.push_back(std::move(t));
  for (const GgufTensorName& t : names) {
    Source& s = plan.add(t.gguf, t.hf, t.shape, t.hf_shape);
    if (t.f32) s.type = GgmlType::F32;
    if (!t.row_order.empty()) s.rows = sources_of(t.row_order);
    if (!t.column_order.empty()) s.columns = sources_of(t.column_order);
    s.stored_as = t.stored_as;
  }
  return c.vocab_size;
}

}  // namespace

GgufExportReport export_gguf(const std::string& checkpoint, const std::string& out,
                             const GgufExportOptions& options) {
  PRISM_CHECK(quant::can_quantize(options.type), "quantize: cannot write {} tensors",
              quant::name(options.type));
  const std::string config_uri = io::join(checkpoint, "config.json");
  const json config = read_json(config_uri);
  const std::string model_type = config.value("model_type", "(none)");
  using Planner = int64_t (*)(const json&, const std::string&, io::GgufWriter&, Plan&);
  const std::map<std::string, std::pair<Planner, std::string>> planners{
      {"llama", {plan_llama, "llama"}},
      {"lfm2", {plan_lfm2, "lfm2"}},
      {"qwen3_5", {plan_qwen35, "qwen35"}},
      {"qwen3_5_text", {plan_qwen35, "qwen35"}}};
  const auto planner = planners.find(model_type);
  if (planner == planners.end()) {
    fail("quantize: {} has model_type \"{}\"; llama, lfm2 and qwen3_5 are written as GGUF",
         config_uri, model_type);
  }
  const io::Store store = io::Store::open(checkpoint);

  io::GgufWriter w;
  w.set_string("general.architecture", planner->second.second);
  w.set_string("general.name", options.name.empty() ? last_component(checkpoint) : options.name);
  w.set_u32("general.file_type", llama_file_type(options.type));
  w.set_u32("general.quantization_version", 2);  // ggml's QK layout version, as llama.cpp writes
  Plan plan(store, checkpoint);
  const int64_t vocab_size = planner->second.first(config, config_uri, w, plan);
  const std::vector<Source>& sources = plan.sources;
  w.set_string("general.type", "model");
  w.set_string("general.size_label", size_label(sources));

  GgufExportReport report;
  std::string tokenizer_dir = options.tokenizer;
  if (tokenizer_dir.empty() && io::exists(io::join(checkpoint, "tokenizer.json"))) {
    tokenizer_dir = checkpoint;
  }
  if (!tokenizer_dir.empty()) {
    PRISM_CHECK(io::exists(io::join(tokenizer_dir, "tokenizer.json")),
                "quantize: --tokenizer={} has no tokenizer.json", tokenizer_dir);
    write_tokenizer(w, tokenizer_dir, vocab_size);
    report.tokenizer = true;
  }

  std::vector<GgmlType> types;
  for (const Source& s : sources) {
    types.push_back(s.type ? *s.type : quant::type_for_tensor(options.type, s.shape));
    w.add_tensor(s.gguf_name, s.shape, types.back());
    ++report.tensors[types.back()];
    report.bytes += w.tensor_bytes(w.tensor_count() - 1);
  }

  w.write(out, [&](size_t i, const io::GgufWriter::Sink& sink) {
    const Source& s = sources[i];
    const GgmlType type = types[i];
    if (s.hf_name.empty()) {  // computed here
      std::vector<std::byte> blocks(w.tensor_bytes(i));
      quant::quantize(type, s.values, blocks);
      sink(blocks);
      return;
    }
    const io::StoredTensor& t = store.at(s.hf_name);
    const DType dtype = *io::to_core_dtype(t.info.dtype);
    const int64_t rows = t.rows(), cols = t.row_elements();
    const uint64_t row_bytes = cols * size_of(dtype);
    // Chunks of whole heads for q and k, whose rows move within a head; all rows at once where
    // rows move across the tensor.
    const int64_t hd = s.head_dim;
    const int64_t unit = s.rope_heads > 0 ? hd : 1;
    const int64_t per_chunk =
        !s.rows.empty()
            ? rows
            : std::max<int64_t>(
                  unit, static_cast<int64_t>(kChunkBytes / (cols * sizeof(float))) / unit * unit);
    std::vector<float> row(s.columns.empty() ? 0 : cols);
    const quant::GgmlTypeInfo& ti = quant::info(type);
    std::vector<std::byte> raw;
    std::vector<float> values;
    std::vector<std::byte> blocks;
    for (int64_t first = 0; first < rows; first += per_chunk) {
      const int64_t n = std::min(per_chunk, rows - first);
      raw.resize(n * row_bytes);
      t.file->read_at(t.offset + first * row_bytes, raw);
      values.resize(n * cols);
      for (int64_t r = 0; r < n; ++r) {
        // GGUF row first + r holds the checkpoint's row hf_row_of(...), in this chunk.
        const int64_t src = s.rope_heads > 0 ? hf_row_of(first + r, hd) - first
                            : s.rows.empty() ? r
                                             : s.rows[first + r] - first;
        float* to = values.data() + r * cols;
        convert_elements(dtype, raw.data() + src * row_bytes, DType::f32,
                         reinterpret_cast<std::byte*>(s.columns.empty() ? to : row.data()), cols);
        if (!s.columns.empty()) {
          for (int64_t c = 0; c < cols; ++c) to[c] = row[s.columns[c]];
        }
        for (int64_t c = 0; c < cols; ++c) {
          switch (s.stored_as) {
            case io::StoredTensor::Stored::as_is:
              break;
            case io::StoredTensor::Stored::plus_one:
              to[c] += 1.0f;
              break;
            case io::StoredTensor::Stored::negated_exp:  // in double, as the converter
              to[c] = static_cast<float>(-std::exp(static_cast<double>(to[c])));
              break;
          }
        }
      }
      blocks.resize(n * cols / ti.block_elements * ti.block_bytes);
      quant::quantize(type, values, blocks);
      sink(blocks);
    }
  });
  return report;
}

}  // namespace prism::llm
