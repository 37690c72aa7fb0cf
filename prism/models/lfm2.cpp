#include "prism/models/lfm2.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "prism/core/error.h"
#include "prism/nn/nn.h"

namespace prism::models {
namespace {

int64_t required(const nlohmann::json& c, const char* key, std::string_view source) {
  if (!c.contains(key) || !c[key].is_number_integer()) {
    fail("lfm2: {} has no integer \"{}\"", source, key);
  }
  return c[key].get<int64_t>();
}

// `key`'s value when present and not null, else `fallback`; a value of the wrong type is an
// error naming the key.
template <typename T>
T optional_value(const nlohmann::json& c, const char* key, T fallback, std::string_view source) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  try {
    return c[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("lfm2: {}: \"{}\" is {}, which is not a {}", source, key, c[key].dump(),
         std::is_same_v<T, bool> ? "boolean" : "number");
  }
}

// The layer kinds: `layer_types` ("conv" / "full_attention"), else the older `full_attn_idxs`,
// else attention everywhere (configuration_lfm2's default).
std::vector<Lfm2Config::Layer> layer_kinds(const nlohmann::json& c, int64_t n,
                                           std::string_view source) {
  using Layer = Lfm2Config::Layer;
  std::vector<Layer> layers(n, Layer::attention);
  if (c.contains("layer_types") && !c["layer_types"].is_null()) {
    const auto& types = c["layer_types"];
    PRISM_CHECK(types.is_array() && static_cast<int64_t>(types.size()) == n,
                "lfm2: {}: layer_types must list {} layers (num_hidden_layers), got {}", source, n,
                types.dump());
    for (int64_t i = 0; i < n; ++i) {
      std::string t = types[i].is_string() ? types[i].get<std::string>() : types[i].dump();
      PRISM_CHECK(t == "conv" || t == "full_attention",
                  "lfm2: {}: layer {} has type \"{}\"; supported: conv, full_attention", source, i,
                  t);
      layers[i] = t == "conv" ? Layer::conv : Layer::attention;
    }
  } else if (c.contains("full_attn_idxs") && !c["full_attn_idxs"].is_null()) {
    std::fill(layers.begin(), layers.end(), Layer::conv);
    for (const auto& i : c["full_attn_idxs"]) {
      PRISM_CHECK(i.is_number_integer() && i.get<int64_t>() >= 0 && i.get<int64_t>() < n,
                  "lfm2: {}: full_attn_idxs names {}, not a layer below {}", source, i.dump(), n);
      layers[i.get<int64_t>()] = Layer::attention;
    }
  }
  return layers;
}

// The rope base as configuration_lfm2 resolves it: rope_parameters' rope_theta (possibly under
// "full_attention"), else the older `theta`, else `rope_theta`. Only the default (unscaled)
// rope is supported.
double read_rope_theta(const nlohmann::json& c, std::string_view source) {
  double theta = optional_value(c, "theta", optional_value(c, "rope_theta", 1e6, source), source);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!c.contains(key) || c[key].is_null()) continue;
    nlohmann::json p = c[key];
    if (p.contains("full_attention") && p["full_attention"].is_object()) p = p["full_attention"];
    PRISM_CHECK(p.is_object(), "lfm2: {}: {} is not an object", source, key);
    std::string type = p.value("rope_type", p.value("type", std::string("default")));
    PRISM_CHECK(type == "default", "lfm2: {}: rope type \"{}\" is not supported (default is)",
                source, type);
    theta = optional_value(p, "rope_theta", theta, source);
  }
  return theta;
}

// Rotary inverse frequencies theta^(-2i/dim), in f32 as Hugging Face computes them.
std::vector<double> rope_inv_freq(int64_t dim, double theta) {
  std::vector<double> inv(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  return inv;
}

}  // namespace

Lfm2Config Lfm2Config::parse(const nlohmann::json& c, std::string_view source) {
  Lfm2Config k;
  k.vocab_size = required(c, "vocab_size", source);
  k.hidden_size = required(c, "hidden_size", source);
  const int64_t n = required(c, "num_hidden_layers", source);
  PRISM_CHECK(n > 0, "lfm2: {}: num_hidden_layers must be positive, got {}", source, n);
  k.num_heads = required(c, "num_attention_heads", source);
  k.num_kv_heads = optional_value<int64_t>(c, "num_key_value_heads", 8, source);
  k.head_dim = optional_value<int64_t>(c, "head_dim",
                                       k.num_heads > 0 ? k.hidden_size / k.num_heads : 0, source);
  k.max_positions = optional_value<int64_t>(c, "max_position_embeddings", 128000, source);
  k.norm_eps = optional_value(c, "norm_eps", 1e-5, source);
  k.conv_kernel = optional_value<int64_t>(c, "conv_L_cache", 3, source);
  k.conv_bias = optional_value(c, "conv_bias", false, source);
  k.rope_theta = read_rope_theta(c, source);
  // configuration_lfm2 reads the older `tie_embedding` before tie_word_embeddings.
  k.tie_word_embeddings = optional_value(
      c, "tie_embedding", optional_value(c, "tie_word_embeddings", true, source), source);
  k.layers = layer_kinds(c, n, source);

  // The MLP width: block_ff_dim (else intermediate_size), adjusted as Lfm2MLP does: two thirds,
  // times block_ffn_dim_multiplier, rounded up to block_multiple_of.
  int64_t width = optional_value<int64_t>(c, "intermediate_size", 12288, source);
  width = optional_value<int64_t>(c, "block_ff_dim", width, source);
  if (optional_value(c, "block_auto_adjust_ff_dim", true, source)) {
    width = static_cast<int64_t>(2.0 * static_cast<double>(width) / 3.0);
    if (!c.contains("block_ffn_dim_multiplier") || !c["block_ffn_dim_multiplier"].is_null()) {
      double multiplier = optional_value(c, "block_ffn_dim_multiplier", 1.0, source);
      int64_t multiple = optional_value<int64_t>(c, "block_multiple_of", 256, source);
      PRISM_CHECK(multiple > 0, "lfm2: {}: block_multiple_of must be positive, got {}", source,
                  multiple);
      width = static_cast<int64_t>(multiplier * static_cast<double>(width));
      width = multiple * ((width + multiple - 1) / multiple);
    }
  }
  k.intermediate_size = width;

  PRISM_CHECK(k.vocab_size > 0 && k.hidden_size > 0 && k.intermediate_size > 0,
              "lfm2: {}: vocab_size, hidden_size and the MLP width must be positive, got {}, {} "
              "and {}",
              source, k.vocab_size, k.hidden_size, k.intermediate_size);
  PRISM_CHECK(k.num_heads > 0 && k.num_kv_heads > 0 && k.num_heads % k.num_kv_heads == 0,
              "lfm2: {}: {} attention heads are not a multiple of {} key/value heads", source,
              k.num_heads, k.num_kv_heads);
  PRISM_CHECK(k.head_dim > 0 && k.head_dim % 2 == 0, "lfm2: {}: head_dim {} must be even", source,
              k.head_dim);
  PRISM_CHECK(k.conv_kernel >= 2, "lfm2: {}: conv_L_cache must be at least 2, got {}", source,
              k.conv_kernel);
  ModelInfo ids;
  ids.read_special_ids(c);
  k.eos_token_ids = ids.eos_token_ids;
  k.bos_token_id = ids.bos_token_id;
  return k;
}

Lfm2::Lfm2(Lfm2Config config, DType dtype) : config_(std::move(config)), dtype_(dtype) {
  PRISM_CHECK(dtype == DType::f32 || dtype == DType::bf16,
              "lfm2: compute dtype must be f32 or bf16, got {}", name(dtype));
  info_ = {.model_type = "lfm2",
           .vocab_size = config_.vocab_size,
           .max_positions = config_.max_positions,
           .eos_token_ids = config_.eos_token_ids,
           .bos_token_id = config_.bos_token_id};
}

std::unique_ptr<CausalLM> make_lfm2(const nlohmann::json& config, std::string_view source,
                                    DType dtype) {
  return std::make_unique<Lfm2>(Lfm2Config::parse(config, source), dtype);
}

std::vector<StateSpec> Lfm2::state_specs(int64_t seqlen) const {
  const Lfm2Config& c = config_;
  Shape kv(dtype_, {{"h", c.num_kv_heads}, {"k", seqlen}, {"hd", c.head_dim}});
  Shape conv(dtype_, {{"s", c.conv_kernel - 1}, {"d", c.hidden_size}});
  std::vector<StateSpec> specs;
  for (Lfm2Config::Layer layer : c.layers) {
    if (layer == Lfm2Config::Layer::attention) {
      const Sharding by_heads = Sharding().split_if_divisible("h", kModelAxis);
      specs.push_back({kv, /*positional=*/true, by_heads});
      specs.push_back({kv, /*positional=*/true, by_heads});
    } else {
      specs.push_back({conv, /*positional=*/false, Sharding().split_if_divisible("d", kModelAxis)});
    }
  }
  return specs;
}

Tensor Lfm2::weight(const std::string& name, std::initializer_list<Dim> dims,
                    const Sharding& sharding) const {
  return parameter(name, Shape(dtype_, dims), sharding);
}

// x.dot(W) (+ b) for a Hugging Face Linear `name` stored [out, in]: contracts `in`, adds `out`.
// A bias is split as the weight's outputs are (and added once, where the outputs are whole).
Tensor Lfm2::linear(const Tensor& x, const std::string& name, Tag in, Tag out, int64_t n, bool bias,
                    const Sharding& sharding) const {
  Tensor y = x.dot(weight(name + ".weight", {{out, n}, {in, x.size(in)}}, sharding), in);
  Sharding bias_sharding;
  for (const Sharding::Split& s : sharding.splits()) {
    if (s.tag == out) bias_sharding.split(s.tag, s.axis, s.unit);
  }
  return bias ? y + weight(name + ".bias", {{out, n}}, bias_sharding) : y;
}

// Lfm2ShortConv: in_proj gives B, C and x; the causal depthwise convolution of B*x (its state
// the last conv_kernel - 1 values of B*x), gated by C, then out_proj. in_proj is stored fused;
// declared as its three row blocks, each splits across devices by channels, and so do the
// convolution and its state; out_proj then contracts the split channels (one all-reduce).
Tensor Lfm2::short_conv_block(const Tensor& h, const std::string& p, const ConvMix& mix) const {
  const int64_t d = config_.hidden_size, taps = config_.conv_kernel;
  const bool bias = config_.conv_bias;
  const Sharding by_channel = Sharding().split_if_divisible("d", kModelAxis);
  auto part = [&](int i) {
    auto rows = [&](const std::string& name) {
      return fmt::format("{}[{}:{}]", name, i * d, (i + 1) * d);
    };
    const Sharding by_out = Sharding().split_if_divisible("o", kModelAxis);
    Tensor y = h.dot(weight(rows(p + "conv.in_proj.weight"), {{"o", d}, {"d", d}}, by_out), "d");
    if (bias) y = y + weight(rows(p + "conv.in_proj.bias"), {{"o", d}}, by_out);
    return y.rename({{"o", "d"}});
  };
  Tensor bx = part(0) * part(2);
  Tensor kernel = weight(p + "conv.conv.weight", {{"d", d}, {"one", 1}, {"tap", taps}}, by_channel)
                      .reshape(Shape(dtype_, {{"d", d}, {"tap", taps}}));
  Tensor y = mix(bx, kernel);
  if (bias) y = y + weight(p + "conv.conv.bias", {{"d", d}}, by_channel);
  return linear(part(1) * y, p + "conv.out_proj", "d", "o", d, bias, by_channel)
      .rename({{"o", "d"}});
}

// The feed-forward block of layer prefix `p` on normalized h {..., d}: SwiGLU, its width split
// across devices (Megatron).
Tensor Lfm2::mlp(const Tensor& h, const std::string& p) const {
  const Lfm2Config& c = config_;
  const Sharding by_f = Sharding().split("f", kModelAxis);
  Tensor gate = linear(h, p + "feed_forward.w1", "d", "f", c.intermediate_size, false, by_f);
  Tensor up = linear(h, p + "feed_forward.w3", "d", "f", c.intermediate_size, false, by_f);
  return linear(gate.silu() * up, p + "feed_forward.w2", "f", "o", c.hidden_size, false, by_f)
      .rename({{"o", "d"}});
}

// Lfm2Attention: grouped-query attention with per-head RMSNorms of q and k before rope.
Tensor Lfm2::attention_block(const Tensor& h, const std::string& p, const Tensor& cos,
                             const Tensor& sin, const AttentionMix& mix) const {
  const Lfm2Config& c = config_;
  const int64_t heads = c.num_heads, kv = c.num_kv_heads, hd = c.head_dim;
  auto head_norm = [&](const Tensor& x, const std::string& name) {
    return x.rms_norm("hd", c.norm_eps) * weight(name, {{"hd", hd}});
  };
  // Split across devices by heads (Megatron): see llama.cpp.
  const Sharding by_kv_heads = Sharding().split_if_divisible("o", kModelAxis, hd);
  Tensor q = linear(h, p + "self_attn.q_proj", "d", "o", heads * hd, false,
                    Sharding().split_if_divisible("o", kModelAxis, hd))
                 .split("o", {{"h", heads}, {"hd", hd}});
  Tensor k = linear(h, p + "self_attn.k_proj", "d", "o", kv * hd, false, by_kv_heads)
                 .split("o", {{"h", kv}, {"hd", hd}});
  Tensor v = linear(h, p + "self_attn.v_proj", "d", "o", kv * hd, false, by_kv_heads)
                 .split("o", {{"h", kv}, {"hd", hd}});
  q = nn::rope(head_norm(q, p + "self_attn.q_layernorm.weight"), cos, sin, "hd");
  k = nn::rope(head_norm(k, p + "self_attn.k_layernorm.weight"), cos, sin, "hd");
  Tensor merged = mix(q, k, v);
  return linear(merged, p + "self_attn.out_proj", "a", "o", c.hidden_size, false,
                Sharding().split_if_divisible("a", kModelAxis, hd))
      .rename({{"o", "d"}});
}

std::vector<Tensor> Lfm2::forward(const Tensor& tokens, const Tensor& start, const Tensor& last,
                                  std::span<const Tensor> states, Logits which) const {
  const Lfm2Config& c = config_;
  const int64_t d = c.hidden_size;
  PRISM_CHECK(states.size() == state_specs(1).size(), "lfm2: {} state tensors given for {} layers",
              states.size(), c.num_layers());
  auto norm = [&](const Tensor& x, const std::string& name) {
    return x.rms_norm("d", c.norm_eps) * weight(name, {{"d", d}});
  };

  // The vocabulary split across devices: the LM head is the largest product of a decoding step.
  const Sharding by_vocab = Sharding().split_if_divisible("voc", kModelAxis);
  Tensor embed = weight("model.embed_tokens.weight", {{"voc", c.vocab_size}, {"d", d}}, by_vocab);
  Tensor x = embed.gather("voc", tokens);  // {s, d}
  Tensor positions = Tensor::iota(Shape(DType::i32, {{"s", tokens.size("s")}}), "s") + start;
  auto [cos, sin] = nn::rope_tables(positions, rope_inv_freq(c.head_dim, c.rope_theta), "hd");

  std::vector<Tensor> outputs{Tensor()};  // logits first, then the states in order
  size_t next = 0;
  for (int64_t l = 0; l < c.num_layers(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Tensor h = norm(x, p + "operator_norm.weight");
    if (c.layers[l] == Lfm2Config::Layer::conv) {
      x = x + short_conv_block(h, p, [&](const Tensor& bx, const Tensor& kernel) {
            auto [y, state] = nn::short_conv(bx, states[next++], kernel, last);
            outputs.push_back(state);
            return y;
          });
    } else {
      x = x +
          attention_block(h, p, cos, sin, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
            // The window's keys and values go into the cache at `start`; attention reads it.
            Tensor keys = states[next].dynamic_update_slice(k.rename({{"s", "k"}}), {{"k", start}});
            Tensor values =
                states[next + 1].dynamic_update_slice(v.rename({{"s", "k"}}), {{"k", start}});
            next += 2;
            outputs.push_back(keys);
            outputs.push_back(values);
            Tensor a = nn::attention(q.rename({{"s", "q"}}), keys, values,
                                     {.causal = true, .offset = start});
            return a.merge({"h", "hd"}, "a").rename({{"q", "s"}});
          });
    }
    x = x + mlp(norm(x, p + "ffn_norm.weight"), p);
  }
  Tensor final = norm(head_rows(x, last, which), "model.embedding_norm.weight");
  std::string head = c.tie_word_embeddings ? "model.embed_tokens" : "lm_head";
  Tensor logits = linear(final, head, "d", "voc", c.vocab_size, false, by_vocab);  // {s, voc}
  outputs[0] = logits_output(logits, which);
  return outputs;
}

// forward's step for one token of each of several conversations: the products run on all of
// them at once ({b, d}), the convolutions and attention on each conversation's own states.
std::vector<Tensor> Lfm2::decode_batch(const Tensor& tokens, const Tensor& positions,
                                       std::span<const std::vector<Tensor>> states) const {
  const Lfm2Config& c = config_;
  const int64_t d = c.hidden_size, batch = tokens.size("b");
  PRISM_CHECK(static_cast<int64_t>(states.size()) == batch,
              "lfm2: {} conversations' states for a batch of {}", states.size(), batch);
  auto norm = [&](const Tensor& x, const std::string& name) {
    return x.rms_norm("d", c.norm_eps) * weight(name, {{"d", d}});
  };
  const Sharding by_vocab = Sharding().split_if_divisible("voc", kModelAxis);
  Tensor embed = weight("model.embed_tokens.weight", {{"voc", c.vocab_size}, {"d", d}}, by_vocab);
  Tensor x = embed.gather("voc", tokens);  // {b, d}
  auto [cos, sin] = nn::rope_tables(positions, rope_inv_freq(c.head_dim, c.rope_theta), "hd");
  const Conversations batch_of(positions);
  const auto one = &Conversations::row;
  std::vector<std::vector<Tensor>> next(batch);
  size_t state = 0;  // the first state of layer l
  for (int64_t l = 0; l < c.num_layers(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Tensor h = norm(x, p + "operator_norm.weight");
    if (c.layers[l] == Lfm2Config::Layer::conv) {
      x = x + short_conv_block(h, p, [&](const Tensor& bx, const Tensor& kernel) {
            std::vector<Tensor> ys;
            for (int64_t i = 0; i < batch; ++i) {
              auto [y, s] = nn::short_conv(one(bx, i, "s"), states[i][state], kernel);
              next[i].push_back(s);
              ys.push_back(y.rename({{"s", "b"}}));
            }
            return batch_of.join(ys);
          });
      state += 1;
    } else {
      x = x +
          attention_block(h, p, cos, sin, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
            std::vector<Tensor> outs;
            for (int64_t i = 0; i < batch; ++i) {
              Tensor keys = states[i][state].dynamic_update_slice(one(k, i, "k"),
                                                                  {{"k", batch_of.position(i)}});
              Tensor values = states[i][state + 1].dynamic_update_slice(
                  one(v, i, "k"), {{"k", batch_of.position(i)}});
              next[i].push_back(keys);
              next[i].push_back(values);
              Tensor a = nn::attention(one(q, i, "q"), keys, values,
                                       {.causal = true, .offset = batch_of.position(i)});
              outs.push_back(a.merge({"h", "hd"}, "a").rename({{"q", "b"}}));
            }
            return batch_of.join(outs);
          });
      state += 2;
    }
    x = x + mlp(norm(x, p + "ffn_norm.weight"), p);
  }
  std::string head = c.tie_word_embeddings ? "model.embed_tokens" : "lm_head";
  Tensor logits = linear(norm(x, "model.embedding_norm.weight"), head, "d", "voc", c.vocab_size,
                         false, by_vocab);  // {b, voc}
  std::vector<Tensor> outputs{logits.convert(DType::f32)};
  for (auto& s : next) outputs.insert(outputs.end(), s.begin(), s.end());
  return outputs;
}

}  // namespace prism::models
