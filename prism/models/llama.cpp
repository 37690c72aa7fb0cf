#include "prism/models/llama.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>

#include "prism/core/error.h"
#include "prism/nn/nn.h"

namespace prism::models {
namespace {

int64_t required(const nlohmann::json& c, const char* key, std::string_view source) {
  if (!c.contains(key) || !c[key].is_number_integer() || c[key].get<int64_t>() <= 0) {
    fail("llama: {} has no positive integer \"{}\"", source, key);
  }
  return c[key].get<int64_t>();
}

}  // namespace

LlamaConfig LlamaConfig::parse(const nlohmann::json& c, std::string_view source) {
  LlamaConfig k;
  k.vocab_size = required(c, "vocab_size", source);
  k.hidden_size = required(c, "hidden_size", source);
  k.intermediate_size = required(c, "intermediate_size", source);
  k.num_layers = required(c, "num_hidden_layers", source);
  k.num_heads = required(c, "num_attention_heads", source);
  k.num_kv_heads = c.value("num_key_value_heads", k.num_heads);
  k.head_dim = c.contains("head_dim") && !c["head_dim"].is_null() ? c["head_dim"].get<int64_t>()
                                                                  : k.hidden_size / k.num_heads;
  k.max_positions = c.value("max_position_embeddings", int64_t{8192});
  k.rope_theta = c.value("rope_theta", 10000.0);
  k.rms_norm_eps = c.value("rms_norm_eps", 1e-6);
  k.tie_word_embeddings = c.value("tie_word_embeddings", false);
  PRISM_CHECK(k.num_heads > 0 && k.num_kv_heads > 0 && k.num_heads % k.num_kv_heads == 0,
              "llama: {}: {} attention heads are not a multiple of {} key/value heads", source,
              k.num_heads, k.num_kv_heads);
  PRISM_CHECK(k.head_dim % 2 == 0, "llama: {}: head_dim {} must be even", source, k.head_dim);
  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null()) {
    const auto& s = c["rope_scaling"];
    std::string type = s.value("rope_type", s.value("type", ""));
    if (type != "llama3" && type != "default") {
      fail("llama: {}: rope_scaling type \"{}\" is not supported (llama3 is)", source, type);
    }
    if (type == "llama3") {
      k.rope_scaling = Llama3Scaling{s.value("factor", 8.0), s.value("low_freq_factor", 1.0),
                                     s.value("high_freq_factor", 4.0),
                                     s.value("original_max_position_embeddings", int64_t{8192})};
    }
  }
  ModelInfo ids;
  ids.read_special_ids(c);
  k.eos_token_ids = ids.eos_token_ids;
  k.bos_token_id = ids.bos_token_id;
  return k;
}

std::vector<double> LlamaConfig::rope_inv_freq() const {
  // In f32, as Hugging Face computes them.
  std::vector<double> inv(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(rope_theta), exponent);
  }
  if (!rope_freq_factors.empty()) {
    PRISM_CHECK(static_cast<int64_t>(rope_freq_factors.size()) == head_dim / 2 && !rope_scaling,
                "llama: {} rope frequency factors for a head of {} (and no rope_scaling beside "
                "them)",
                rope_freq_factors.size(), head_dim);
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      inv[i] = static_cast<float>(inv[i]) / static_cast<float>(rope_freq_factors[i]);
    }
    return inv;
  }
  if (!rope_scaling) return inv;
  const Llama3Scaling& s = *rope_scaling;
  double low_wavelen = s.original_max_positions / s.low_freq_factor;
  double high_wavelen = s.original_max_positions / s.high_freq_factor;
  for (double& f : inv) {
    float wavelen = static_cast<float>(2 * std::numbers::pi / f);
    float scaled = wavelen > low_wavelen ? static_cast<float>(f / s.factor) : static_cast<float>(f);
    if (wavelen >= high_wavelen && wavelen <= low_wavelen) {  // between: interpolate
      float smooth = static_cast<float>((s.original_max_positions / wavelen - s.low_freq_factor) /
                                        (s.high_freq_factor - s.low_freq_factor));
      scaled = (1 - smooth) * scaled / static_cast<float>(s.factor) + smooth * scaled;
    }
    f = scaled;
  }
  return inv;
}

Llama::Llama(LlamaConfig config, DType dtype) : config_(std::move(config)), dtype_(dtype) {
  PRISM_CHECK(dtype == DType::f32 || dtype == DType::bf16,
              "llama: compute dtype must be f32 or bf16, got {}", name(dtype));
  info_ = {.model_type = "llama",
           .vocab_size = config_.vocab_size,
           .max_positions = config_.max_positions,
           .eos_token_ids = config_.eos_token_ids,
           .bos_token_id = config_.bos_token_id};
}

std::unique_ptr<CausalLM> make_llama(const nlohmann::json& config, std::string_view source,
                                     DType dtype) {
  return std::make_unique<Llama>(LlamaConfig::parse(config, source), dtype);
}

std::vector<Shape> Llama::cache_shapes(int64_t max_seq) const {
  Shape s(dtype_, {{"h", config_.num_kv_heads}, {"k", max_seq}, {"hd", config_.head_dim}});
  return std::vector<Shape>(2 * config_.num_layers, s);
}

// Tensor parallelism (Megatron): the query, key, value, gate and up projections are split by
// their outputs (whole heads), the output and down projections by their inputs, so each
// device computes its heads and its slice of the MLP, and one all-reduce follows each block.
// Heads that do not divide among the devices stay whole, computed on each (a model with fewer
// heads than devices still splits its MLP); so do key/value heads fewer than the devices.
std::vector<StateSpec> Llama::state_specs(int64_t seqlen) const {
  std::vector<StateSpec> specs;
  for (const Shape& s : cache_shapes(seqlen)) {
    specs.push_back({s, /*positional=*/true, Sharding().split_if_divisible("h", kModelAxis)});
  }
  return specs;
}

Tensor Llama::weight(const std::string& name, std::initializer_list<Dim> dims,
                     const Sharding& sharding) const {
  return parameter(name, Shape(dtype_, dims), sharding);
}

// x.dot(W) for a Hugging Face Linear weight stored [out, in]: contracts `in`, adds `out`.
Tensor Llama::linear(const Tensor& x, const std::string& name, Tag in, Tag out, int64_t n,
                     const Sharding& sharding) const {
  return x.dot(weight(name, {{out, n}, {in, x.size(in)}}, sharding), in);
}

Tensor Llama::norm(const Tensor& x, const std::string& name) const {
  return x.rms_norm("d", config_.rms_norm_eps) * weight(name, {{"d", config_.hidden_size}});
}

// The embedding table, which a tied LM head reads too; split by vocabulary across devices (the
// LM head is the largest product of a decoding step).
Tensor Llama::embedding() const {
  return weight("model.embed_tokens.weight",
                {{"voc", config_.vocab_size}, {"d", config_.hidden_size}},
                Sharding().split_if_divisible("voc", kModelAxis));
}

// The logits of the final hidden states {..., d}: {..., voc}.
Tensor Llama::lm_head(const Tensor& x) const {
  const LlamaConfig& c = config_;
  std::string head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  return linear(norm(x, "model.norm.weight"), head, "d", "voc", c.vocab_size,
                Sharding().split_if_divisible("voc", kModelAxis));
}

// Layer l's queries, keys and values of the normalized hidden states h, rotated: {..., h, hd}.
// Split across devices by heads (Megatron): see state_specs.
Llama::Qkv Llama::attention_inputs(const Tensor& h, int64_t l, const Tensor& cos,
                                   const Tensor& sin) const {
  const LlamaConfig& c = config_;
  const int64_t heads = c.num_heads, kv = c.num_kv_heads, hd = c.head_dim;
  const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
  const Sharding by_heads = Sharding().split_if_divisible("o", kModelAxis, hd);
  Tensor q = linear(h, p + "q_proj.weight", "d", "o", heads * hd, by_heads)
                 .split("o", {{"h", heads}, {"hd", hd}});
  Tensor k = linear(h, p + "k_proj.weight", "d", "o", kv * hd, by_heads)
                 .split("o", {{"h", kv}, {"hd", hd}});
  Tensor v = linear(h, p + "v_proj.weight", "d", "o", kv * hd, by_heads)
                 .split("o", {{"h", kv}, {"hd", hd}});
  return {nn::rope(q, cos, sin, "hd"), nn::rope(k, cos, sin, "hd"), v};
}

// The rest of layer l after attention: the output projection of `attended` {..., a} onto the
// residual x, then the MLP's.
Tensor Llama::layer_output(const Tensor& x, const Tensor& attended, int64_t l) const {
  const LlamaConfig& c = config_;
  const int64_t d = c.hidden_size;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  Tensor y = x + linear(attended, p + "self_attn.o_proj.weight", "a", "o", d,
                        Sharding().split_if_divisible("a", kModelAxis, c.head_dim))
                     .rename({{"o", "d"}});
  Tensor h = norm(y, p + "post_attention_layernorm.weight");
  const Sharding by_f = Sharding().split("f", kModelAxis);
  Tensor gate = linear(h, p + "mlp.gate_proj.weight", "d", "f", c.intermediate_size, by_f);
  Tensor up = linear(h, p + "mlp.up_proj.weight", "d", "f", c.intermediate_size, by_f);
  return y + linear(gate.silu() * up, p + "mlp.down_proj.weight", "f", "o", d, by_f)
                 .rename({{"o", "d"}});
}

std::vector<Tensor> Llama::forward(const Tensor& tokens, const Tensor& start, const Tensor& last,
                                   std::span<const Tensor> caches, Logits which) const {
  const LlamaConfig& c = config_;
  PRISM_CHECK(static_cast<int64_t>(caches.size()) == 2 * c.num_layers,
              "llama: {} cache tensors given for {} layers", caches.size(), c.num_layers);
  Tensor x = embedding().gather("voc", tokens);  // {s, d}
  Tensor positions = Tensor::iota(Shape(DType::i32, {{"s", tokens.size("s")}}), "s") + start;
  auto [cos, sin] = nn::rope_tables(positions, c.rope_inv_freq(), "hd");

  std::vector<Tensor> outputs{Tensor()};  // logits first
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto [q, k, v] = attention_inputs(norm(x, p + "input_layernorm.weight"), l, cos, sin);
    // The window's keys and values go into the cache at `start`; attention reads the cache.
    Tensor keys = caches[2 * l].dynamic_update_slice(k.rename({{"s", "k"}}), {{"k", start}});
    Tensor values = caches[2 * l + 1].dynamic_update_slice(v.rename({{"s", "k"}}), {{"k", start}});
    outputs.push_back(keys);
    outputs.push_back(values);
    Tensor a =
        nn::attention(q.rename({{"s", "q"}}), keys, values, {.causal = true, .offset = start});
    x = layer_output(x, a.merge({"h", "hd"}, "a").rename({{"q", "s"}}), l);
  }
  Tensor logits = lm_head(head_rows(x, last, which));  // {s, voc}
  outputs[0] = logits_output(logits, which);
  return outputs;
}

// The step of forward() for one token of each of several conversations: the products run on
// all of them at once ({b, d} activations), attention and the cache updates on each
// conversation's own caches at its own position.
std::vector<Tensor> Llama::decode_batch(const Tensor& tokens, const Tensor& positions,
                                        std::span<const std::vector<Tensor>> caches) const {
  const LlamaConfig& c = config_;
  const int64_t batch = tokens.size("b");
  PRISM_CHECK(static_cast<int64_t>(caches.size()) == batch,
              "llama: {} conversations' caches for a batch of {}", caches.size(), batch);
  Tensor x = embedding().gather("voc", tokens);  // {b, d}
  auto [cos, sin] = nn::rope_tables(positions, c.rope_inv_freq(), "hd");
  const Conversations batch_of(positions);
  std::vector<std::vector<Tensor>> next(batch);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto [q, k, v] = attention_inputs(norm(x, p + "input_layernorm.weight"), l, cos, sin);
    std::vector<Tensor> outs;
    for (int64_t i = 0; i < batch; ++i) {
      auto one = [&](const Tensor& t, Tag as) { return Conversations::row(t, i, as); };
      Tensor keys =
          caches[i][2 * l].dynamic_update_slice(one(k, "k"), {{"k", batch_of.position(i)}});
      Tensor values =
          caches[i][2 * l + 1].dynamic_update_slice(one(v, "k"), {{"k", batch_of.position(i)}});
      next[i].push_back(keys);
      next[i].push_back(values);
      Tensor a = nn::attention(one(q, "q"), keys, values,
                               {.causal = true, .offset = batch_of.position(i)});
      outs.push_back(a.merge({"h", "hd"}, "a").rename({{"q", "b"}}));
    }
    x = layer_output(x, batch_of.join(outs), l);
  }
  std::vector<Tensor> outputs{lm_head(x).convert(DType::f32)};  // {b, voc}
  for (auto& states : next) outputs.insert(outputs.end(), states.begin(), states.end());
  return outputs;
}

}  // namespace prism::models
