#include "prism/models/qwen3_5.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "prism/core/error.h"
#include "prism/nn/nn.h"

namespace prism::models {
namespace {

int64_t required(const nlohmann::json& c, const char* key, std::string_view source) {
  if (!c.contains(key) || !c[key].is_number_integer() || c[key].get<int64_t>() <= 0) {
    fail("qwen3_5: {} has no positive integer \"{}\"", source, key);
  }
  return c[key].get<int64_t>();
}

// A Gated DeltaNet prefill runs the chunked form over blocks of this many tokens.
constexpr int64_t kDeltaChunk = 64;

// The prefix of the multi-token prediction head's one decoder layer.
constexpr const char* kHeadLayer = "mtp.layers.0.";

}  // namespace

Qwen3_5Config Qwen3_5Config::parse(const nlohmann::json& top, std::string_view source) {
  const bool composite = top.contains("text_config") && top["text_config"].is_object();
  const nlohmann::json& c = composite ? top["text_config"] : top;
  Qwen3_5Config k;
  k.prefix = composite ? "model.language_model." : "model.";
  k.vocab_size = required(c, "vocab_size", source);
  k.hidden_size = required(c, "hidden_size", source);
  k.intermediate_size = required(c, "intermediate_size", source);
  const int64_t num_layers = required(c, "num_hidden_layers", source);
  k.num_heads = required(c, "num_attention_heads", source);
  k.num_kv_heads = c.value("num_key_value_heads", k.num_heads);
  k.head_dim = c.contains("head_dim") && c["head_dim"].is_number_integer()
                   ? c["head_dim"].get<int64_t>()
                   : k.hidden_size / k.num_heads;
  k.linear_key_heads = c.value("linear_num_key_heads", int64_t{16});
  k.linear_value_heads = c.value("linear_num_value_heads", int64_t{32});
  k.linear_key_dim = c.value("linear_key_head_dim", int64_t{128});
  k.linear_value_dim = c.value("linear_value_head_dim", int64_t{128});
  k.conv_kernel = c.value("linear_conv_kernel_dim", int64_t{4});
  k.rms_norm_eps = c.value("rms_norm_eps", 1e-6);
  k.max_positions = c.value("max_position_embeddings", int64_t{32768});
  // The text config's own flag where it has one (the published configs set both alike).
  k.tie_word_embeddings = c.contains("tie_word_embeddings")
                              ? c["tie_word_embeddings"].get<bool>()
                              : top.value("tie_word_embeddings", false);
  // A multi-token prediction head with embeddings of its own is not one prism runs (none of
  // the published checkpoints has one): it counts as none.
  const nlohmann::json& mtp =
      c.contains("mtp_num_hidden_layers") ? c["mtp_num_hidden_layers"] : nlohmann::json(0);
  k.mtp_layers = mtp.is_number_integer() && !c.value("mtp_use_dedicated_embeddings", false)
                     ? mtp.get<int64_t>()
                     : 0;

  // rope_parameters (older configs: rope_theta and partial_rotary_factor beside them). The
  // multimodal sections (mrope_section) only matter for image and video positions: text
  // positions are the same in all three, which is plain rotary.
  nlohmann::json rope = c.contains("rope_parameters") && c["rope_parameters"].is_object()
                            ? c["rope_parameters"]
                            : nlohmann::json::object();
  std::string rope_type = rope.value("rope_type", std::string("default"));
  PRISM_CHECK(rope_type == "default", "qwen3_5: {}: rope_type \"{}\" is not supported (default is)",
              source, rope_type);
  k.rope_theta = rope.value("rope_theta", c.value("rope_theta", 10000.0));
  double partial = rope.value("partial_rotary_factor", c.value("partial_rotary_factor", 0.25));
  k.rotary_dim = static_cast<int64_t>(static_cast<double>(k.head_dim) * partial);

  if (c.contains("layer_types") && c["layer_types"].is_array()) {
    for (const auto& t : c["layer_types"]) {
      std::string type = t.is_string() ? t.get<std::string>() : t.dump();
      if (type == "linear_attention") {
        k.layers.push_back(Layer::linear_attention);
      } else if (type == "full_attention") {
        k.layers.push_back(Layer::full_attention);
      } else {
        fail("qwen3_5: {}: layer type \"{}\" is not supported (linear_attention, full_attention)",
             source, type);
      }
    }
    PRISM_CHECK(static_cast<int64_t>(k.layers.size()) == num_layers,
                "qwen3_5: {}: layer_types lists {} layers but num_hidden_layers is {}", source,
                k.layers.size(), num_layers);
  } else {
    const int64_t interval = c.value("full_attention_interval", int64_t{4});
    PRISM_CHECK(interval > 0, "qwen3_5: {}: full_attention_interval must be positive", source);
    for (int64_t i = 0; i < num_layers; ++i) {
      k.layers.push_back((i + 1) % interval ? Layer::linear_attention : Layer::full_attention);
    }
  }

  // What this implementation computes, checked rather than assumed.
  PRISM_CHECK(c.value("hidden_act", std::string("silu")) == "silu",
              "qwen3_5: {}: hidden_act \"{}\" is not supported (silu is)", source,
              c.value("hidden_act", std::string()));
  PRISM_CHECK(!c.value("attention_bias", false), "qwen3_5: {}: attention_bias is not supported",
              source);
  PRISM_CHECK(c.value("attn_output_gate", true),
              "qwen3_5: {}: attn_output_gate false is not supported", source);
  PRISM_CHECK(!c.contains("num_experts") || c["num_experts"].is_null() ||
                  c["num_experts"].get<int64_t>() == 0,
              "qwen3_5: {}: mixture-of-experts models are not supported", source);
  PRISM_CHECK(k.num_heads > 0 && k.num_kv_heads > 0 && k.num_heads % k.num_kv_heads == 0,
              "qwen3_5: {}: {} attention heads are not a multiple of {} key/value heads", source,
              k.num_heads, k.num_kv_heads);
  PRISM_CHECK(k.linear_key_heads > 0 && k.linear_value_heads % k.linear_key_heads == 0,
              "qwen3_5: {}: {} linear value heads are not a multiple of {} key heads", source,
              k.linear_value_heads, k.linear_key_heads);
  PRISM_CHECK(k.rotary_dim % 2 == 0 && k.rotary_dim > 0 && k.rotary_dim <= k.head_dim,
              "qwen3_5: {}: rotary dims {} (head_dim {} x partial_rotary_factor) must be even and "
              "at most head_dim",
              source, k.rotary_dim, k.head_dim);
  PRISM_CHECK(k.conv_kernel >= 2, "qwen3_5: {}: linear_conv_kernel_dim must be at least 2", source);

  ModelInfo ids;
  ids.read_special_ids(top);
  ids.read_special_ids(c);
  k.eos_token_ids = ids.eos_token_ids;
  k.bos_token_id = ids.bos_token_id;
  return k;
}

std::vector<double> Qwen3_5Config::rope_inv_freq() const {
  std::vector<double> inv(rotary_dim / 2);
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(rope_theta), exponent);
  }
  return inv;
}

Qwen3_5::Qwen3_5(Qwen3_5Config config, DType dtype) : config_(std::move(config)), dtype_(dtype) {
  PRISM_CHECK(dtype == DType::f32 || dtype == DType::bf16,
              "qwen3_5: compute dtype must be f32 or bf16, got {}", name(dtype));
  info_ = {.model_type = "qwen3_5",
           .vocab_size = config_.vocab_size,
           .max_positions = config_.max_positions,
           .eos_token_ids = config_.eos_token_ids,
           .bos_token_id = config_.bos_token_id};
}

void Qwen3_5::use_draft_head() {
  PRISM_CHECK(config_.mtp_layers > 0,
              "llm: this qwen3_5 checkpoint has no multi-token prediction head "
              "(mtp_num_hidden_layers) for --speculate=mtp");
  PRISM_CHECK(config_.mtp_layers == 1,
              "llm: this qwen3_5 checkpoint's multi-token prediction head has {} layers; prism "
              "runs heads of one",
              config_.mtp_layers);
  head_ = true;
}

std::unique_ptr<CausalLM> make_qwen3_5(const nlohmann::json& config, std::string_view source,
                                       DType dtype) {
  return std::make_unique<Qwen3_5>(Qwen3_5Config::parse(config, source), dtype);
}

std::vector<StateSpec> Qwen3_5::state_specs(int64_t seqlen) const {
  const Qwen3_5Config& c = config_;
  std::vector<StateSpec> specs;
  for (Qwen3_5Config::Layer layer : c.layers) {
    if (layer == Qwen3_5Config::Layer::linear_attention) {
      // The convolution's states of q, k and v apart, each split by its heads.
      for (const ConvPart& part : conv_parts()) {
        specs.push_back({Shape(dtype_, {{"s", c.conv_kernel - 1}, {"c", part.channels}}), false,
                         Sharding().split_if_divisible("c", kModelAxis, part.head_dim)});
      }
      specs.push_back({Shape(DType::f32, {{"h", c.linear_value_heads},
                                          {"dk", c.linear_key_dim},
                                          {"dv", c.linear_value_dim}}),
                       false, Sharding().split_if_divisible("h", kModelAxis)});
    } else {
      Shape kv(dtype_, {{"h", c.num_kv_heads}, {"k", seqlen}, {"hd", c.head_dim}});
      const Sharding by_heads = Sharding().split_if_divisible("h", kModelAxis);
      specs.push_back({kv, true, by_heads});
      specs.push_back({kv, true, by_heads});
    }
  }
  if (head_) {  // the draft head's: hidden states, then its layer's keys and values
    specs.push_back({Shape(dtype_, {{"k", seqlen}, {"d", c.hidden_size}}), true});
    Shape kv(dtype_, {{"h", c.num_kv_heads}, {"k", seqlen}, {"hd", c.head_dim}});
    const Sharding by_heads = Sharding().split_if_divisible("h", kModelAxis);
    specs.push_back({kv, true, by_heads});
    specs.push_back({kv, true, by_heads});
  }
  return specs;
}

Tensor Qwen3_5::weight(const std::string& name, std::initializer_list<Dim> dims,
                       std::optional<DType> dtype, const Sharding& sharding) const {
  return parameter(name, Shape(dtype.value_or(dtype_), dims), sharding);
}

// The LM head's weight: the embeddings where they are tied.
std::string Qwen3_5::lm_head() const {
  return config_.tie_word_embeddings ? config_.prefix + "embed_tokens.weight" : "lm_head.weight";
}

// x.dot(W) for a Hugging Face Linear weight stored [out, in]: contracts `in`, adds `out`.
Tensor Qwen3_5::linear(const Tensor& x, const std::string& name, Tag in, Tag out, int64_t n,
                       const Sharding& sharding) const {
  return x.dot(weight(name, {{out, n}, {in, x.size(in)}}, {}, sharding), in);
}

// Qwen's RMSNorm scales by (1 + w): its weights are stored centred on zero.
Tensor Qwen3_5::norm(const Tensor& x, const std::string& name, Tag tag) const {
  return x.rms_norm(tag, config_.rms_norm_eps) * (weight(name, {{tag, x.size(tag)}}) + 1.0);
}

std::vector<Qwen3_5::ConvPart> Qwen3_5::conv_parts() const {
  const Qwen3_5Config& c = config_;
  const int64_t keys = c.linear_key_heads * c.linear_key_dim;
  return {{0, keys, c.linear_key_dim},
          {keys, keys, c.linear_key_dim},
          {2 * keys, c.linear_value_heads * c.linear_value_dim, c.linear_value_dim}};
}

Tensor Qwen3_5::linear_attention(const Tensor& x, const std::string& p,
                                 const std::optional<Tensor>& last, const ConvMix& conv,
                                 const RuleMix& rule) const {
  const Qwen3_5Config& c = config_;
  const int64_t d = c.hidden_size, nk = c.linear_key_heads, nv = c.linear_value_heads;
  const int64_t dk = c.linear_key_dim, dv = c.linear_value_dim;
  // q, k and v are stored fused: one projection and one depthwise causal convolution over
  // their channels side by side. Declared as the three they are (row blocks of the stored
  // tensors), each splits across devices by its own heads; the convolution carries its last
  // kernel - 1 inputs.
  std::vector<Tensor> mixed;
  const std::vector<ConvPart> parts = conv_parts();
  for (size_t i = 0; i < parts.size(); ++i) {
    const ConvPart& part = parts[i];
    const Sharding by_heads = Sharding().split_if_divisible("c", kModelAxis, part.head_dim);
    auto rows = [&](const std::string& name) {
      return fmt::format("{}[{}:{}]", name, part.first, part.first + part.channels);
    };
    Tensor proj = x.dot(
        weight(rows(p + "in_proj_qkv.weight"), {{"c", part.channels}, {"d", d}}, {}, by_heads),
        "d");  // {s, c}
    Tensor kernel = weight(rows(p + "conv1d.weight"),
                           {{"c", part.channels}, {"one", 1}, {"tap", c.conv_kernel}}, {}, by_heads)
                        .reshape(Shape(dtype_, {{"c", part.channels}, {"tap", c.conv_kernel}}));
    mixed.push_back(conv(i, proj, kernel).silu());
  }
  Tensor q = mixed[0].split("c", {{"h", nk}, {"dk", dk}});
  Tensor k = mixed[1].split("c", {{"h", nk}, {"dk", dk}});
  Tensor v = mixed[2].split("c", {{"h", nv}, {"dv", dv}});
  // q and k L2-normalized in f32 (eps 1e-6), q scaled by 1/sqrt(dk). x / sqrt(sum x^2 + eps)
  // is an RMSNorm with eps / dk, divided by sqrt(dk): one composite instead of a sum, a square
  // root and two products.
  const double root = std::sqrt(static_cast<double>(dk));
  auto l2 = [&](const Tensor& t, double scale) {
    return t.convert(DType::f32).rms_norm("dk", 1e-6 / static_cast<double>(dk)) * scale;
  };
  q = l2(q, 1 / static_cast<double>(dk));
  k = l2(k, 1 / root);
  // beta = sigmoid(b); g = -exp(A_log) softplus(a + dt_bias), softplus as PyTorch's (linear
  // above 20). Padding tokens (after `last`) get beta = 0, g = 0: the state stays as it is.
  const Sharding by_value_heads = Sharding().split_if_divisible("h", kModelAxis);
  Tensor b = linear(x, p + "in_proj_b.weight", "d", "h", nv, by_value_heads)
                 .convert(DType::f32)
                 .logistic();
  Tensor a = linear(x, p + "in_proj_a.weight", "d", "h", nv, by_value_heads).convert(DType::f32) +
             weight(p + "dt_bias", {{"h", nv}}, DType::f32, by_value_heads);
  Tensor softplus = select(gt(a, Tensor::scalar(20.0)), a, a.exp().log1p());
  Tensor g = -(weight(p + "A_log", {{"h", nv}}, DType::f32, by_value_heads).exp()) * softplus;
  if (last) {
    Tensor real = le(Tensor::iota(Shape(DType::i32, {{"s", x.size("s")}}), "s"), *last);
    Tensor zero = Tensor::scalar(0.0);
    b = select(real, b, zero);
    g = select(real, g, zero);
  }
  Tensor out = rule(q, k, v, g, b);
  // The gated RMSNorm scales by w (not 1 + w) and multiplies by silu(z).
  const Sharding by_value_rows = Sharding().split_if_divisible("o", kModelAxis, dv);
  Tensor z = linear(x, p + "in_proj_z.weight", "d", "o", nv * dv, by_value_rows)
                 .split("o", {{"h", nv}, {"dv", dv}});
  Tensor y =
      out.rms_norm("dv", c.rms_norm_eps) * weight(p + "norm.weight", {{"dv", dv}}) * z.silu();
  return linear(y.merge({"h", "dv"}, "a"), p + "out_proj.weight", "a", "o", d,
                Sharding().split_if_divisible("a", kModelAxis, dv))
      .rename({{"o", "d"}});
}

// The MLP of layer prefix `p` on normalized h {..., d}: SwiGLU, its width split across devices
// (Megatron).
Tensor Qwen3_5::mlp(const Tensor& h, const std::string& p) const {
  const Qwen3_5Config& c = config_;
  const Sharding by_f = Sharding().split("f", kModelAxis);
  Tensor gate = linear(h, p + "mlp.gate_proj.weight", "d", "f", c.intermediate_size, by_f);
  Tensor up = linear(h, p + "mlp.up_proj.weight", "d", "f", c.intermediate_size, by_f);
  return linear(gate.silu() * up, p + "mlp.down_proj.weight", "f", "o", c.hidden_size, by_f)
      .rename({{"o", "d"}});
}

// Rotary embedding on the first rotary_dim dims of each head {..., hd}; the rest pass through.
Tensor Qwen3_5::rotate(const Tensor& t, const Tensor& cos, const Tensor& sin) const {
  const int64_t hd = config_.head_dim, rot = config_.rotary_dim;
  if (rot == hd) return nn::rope(t, cos, sin, "hd");
  return concat({nn::rope(t.slice("hd", 0, rot), cos, sin, "hd"), t.slice("hd", rot, hd - rot)},
                "hd");
}

std::pair<Tensor, Tensor> Qwen3_5::keys_values(const Tensor& x, const std::string& p,
                                               const Tensor& cos, const Tensor& sin) const {
  const int64_t kv = config_.num_kv_heads, hd = config_.head_dim;
  const Sharding by_kv_heads = Sharding().split_if_divisible("o", kModelAxis, hd);
  Tensor k = linear(x, p + "k_proj.weight", "d", "o", kv * hd, by_kv_heads)
                 .split("o", {{"h", kv}, {"hd", hd}});
  Tensor v = linear(x, p + "v_proj.weight", "d", "o", kv * hd, by_kv_heads)
                 .split("o", {{"h", kv}, {"hd", hd}});
  return {rotate(norm(k, p + "k_norm.weight", "hd"), cos, sin), v};
}

Tensor Qwen3_5::full_attention(const Tensor& x, const std::string& p, const Tensor& cos,
                               const Tensor& sin, const AttentionMix& mix) const {
  const Qwen3_5Config& c = config_;
  const int64_t heads = c.num_heads, hd = c.head_dim;
  // q_proj gives each head its query and then its output gate.
  // Split across devices by heads (Megatron): see llama.cpp.
  Tensor qg = linear(x, p + "q_proj.weight", "d", "o", heads * 2 * hd,
                     Sharding().split_if_divisible("o", kModelAxis, 2 * hd))
                  .split("o", {{"h", heads}, {"x", 2 * hd}});
  Tensor q = qg.slice("x", 0, hd).rename({{"x", "hd"}});
  Tensor gate = qg.slice("x", hd, hd).rename({{"x", "hd"}});
  q = rotate(norm(q, p + "q_norm.weight", "hd"), cos, sin);
  auto [k, v] = keys_values(x, p, cos, sin);
  Tensor a = mix(q, k, v) * gate.logistic();
  return linear(a.merge({"h", "hd"}, "a"), p + "o_proj.weight", "a", "o", c.hidden_size,
                Sharding().split_if_divisible("a", kModelAxis, hd))
      .rename({{"o", "d"}});
}

std::vector<Tensor> Qwen3_5::forward(const Tensor& tokens, const Tensor& start, const Tensor& last,
                                     std::span<const Tensor> states, Logits which) const {
  const Qwen3_5Config& c = config_;
  const int64_t d = c.hidden_size;
  PRISM_CHECK(states.size() == state_specs(1).size(),
              "qwen3_5: {} state tensors given for {} layers", states.size(), c.layers.size());
  const std::string& lm = c.prefix;
  // The vocabulary split across devices: the LM head is the largest product of a decoding step.
  const Sharding by_vocab = Sharding().split_if_divisible("voc", kModelAxis);
  Tensor embed =
      weight(lm + "embed_tokens.weight", {{"voc", c.vocab_size}, {"d", d}}, {}, by_vocab);
  const Tensor embedded = embed.gather("voc", tokens);  // {s, d}
  Tensor x = embedded;
  Tensor positions = Tensor::iota(Shape(DType::i32, {{"s", tokens.size("s")}}), "s") + start;
  auto [cos, sin] = nn::rope_tables(positions, c.rope_inv_freq(), "hd");

  std::vector<Tensor> outputs{Tensor()};  // logits first, then the states
  size_t next = 0;                        // the first state of layer l
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const std::string p = lm + "layers." + std::to_string(l) + ".";
    Tensor h = norm(x, p + "input_layernorm.weight", "d");
    if (c.layers[l] == Qwen3_5Config::Layer::linear_attention) {
      auto conv = [&](size_t part, const Tensor& proj, const Tensor& kernel) {
        nn::ShortConvResult r =
            nn::short_conv(proj, states[next + part], kernel, last, "s", "c", "tap");
        outputs.push_back(r.state);
        return r.y;
      };
      auto rule = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                      const Tensor& b) {
        auto r = nn::gated_delta_rule(q, k, v, g, b, states[next + 3], {.chunk = kDeltaChunk});
        outputs.push_back(r.state);
        return r.out;
      };
      x = x + linear_attention(h, p + "linear_attn.", last, conv, rule);
      next += 4;
    } else {
      x = x + full_attention(h, p + "self_attn.", cos, sin,
                             [&](const Tensor& q, const Tensor& k, const Tensor& v) {
                               Tensor keys = states[next].dynamic_update_slice(
                                   k.rename({{"s", "k"}}), {{"k", start}});
                               Tensor values = states[next + 1].dynamic_update_slice(
                                   v.rename({{"s", "k"}}), {{"k", start}});
                               outputs.push_back(keys);
                               outputs.push_back(values);
                               return nn::attention(q.rename({{"s", "q"}}), keys, values,
                                                    {.causal = true, .offset = start})
                                   .rename({{"q", "s"}});
                             });
      next += 2;
    }
    x = x + mlp(norm(x, p + "post_attention_layernorm.weight", "d"), p);
  }
  Tensor final;
  if (head_) {  // every token's hidden state, for the draft head
    const Tensor hidden = norm(x, lm + "norm.weight", "d");
    for (Tensor& t : head_window(embedded, hidden, positions, start, states.last(3))) {
      outputs.push_back(std::move(t));
    }
    final = head_rows(hidden, last, which);
  } else {
    final = norm(head_rows(x, last, which), lm + "norm.weight", "d");
  }
  Tensor logits = linear(final, lm_head(), "d", "voc", c.vocab_size, by_vocab);  // {s, voc}
  outputs[0] = logits_output(logits, which);
  return outputs;
}

Tensor Qwen3_5::head_input(const Tensor& embedded, const Tensor& hidden) const {
  Tensor both = concat({norm(embedded, "mtp.pre_fc_norm_embedding.weight", "d"),
                        norm(hidden, "mtp.pre_fc_norm_hidden.weight", "d")},
                       "d");
  return linear(both, "mtp.fc.weight", "d", "o", config_.hidden_size).rename({{"o", "d"}});
}

std::pair<Tensor, Tensor> Qwen3_5::head_entries(const Tensor& embedded, const Tensor& prior,
                                                const Tensor& positions) const {
  auto [cos, sin] = nn::rope_tables(positions - 1, config_.rope_inv_freq(), "hd");
  const std::string p = kHeadLayer;
  return keys_values(norm(head_input(embedded, prior), p + "input_layernorm.weight", "d"),
                     p + "self_attn.", cos, sin);
}

std::vector<Tensor> Qwen3_5::head_window(const Tensor& embedded, const Tensor& hidden,
                                         const Tensor& positions, const Tensor& start,
                                         std::span<const Tensor> states) const {
  const int64_t s = hidden.size("s");
  const Tensor zero = Tensor::scalar(0, DType::i32);
  // Each entry of the head's cache pairs a token with the model's hidden state before it: the
  // window's first token with the one the last step left (none at position 0), the others
  // with the window's own. It sits at the position of that hidden state, start - 1 on.
  const Tensor at = maximum(start - 1, zero);
  Tensor before = states[0].dynamic_slice("k", at, 1).rename({{"k", "s"}});
  Tensor prior = s == 1 ? before : concat({before, hidden.slice("s", 0, s - 1)}, "s");
  auto [k, v] = head_entries(embedded, prior, positions);
  if (s > 1) {  // at position 0 the first entry has no hidden state: the others move down one
    const Tensor first = eq(start, zero);
    auto down = [&](const Tensor& t) {
      return select(first, concat({t.slice("s", 1, s - 1), t.slice("s", s - 1, 1)}, "s"), t);
    };
    k = down(k);
    v = down(v);
  }
  return {states[0].dynamic_update_slice(hidden.rename({{"s", "k"}}), {{"k", start}}),
          states[1].dynamic_update_slice(k.rename({{"s", "k"}}), {{"k", at}}),
          states[2].dynamic_update_slice(v.rename({{"s", "k"}}), {{"k", at}})};
}

std::vector<Tensor> Qwen3_5::draft_step(const Tensor& token, const Tensor& position,
                                        std::span<const Tensor> states) const {
  const Qwen3_5Config& c = config_;
  PRISM_CHECK(head_ && states.size() == 3, "qwen3_5: {} states for a draft head of 3",
              states.size());
  const std::string& lm = c.prefix;
  const Sharding by_vocab = Sharding().split_if_divisible("voc", kModelAxis);
  Tensor embed = weight(lm + "embed_tokens.weight", {{"voc", c.vocab_size}, {"d", c.hidden_size}},
                        {}, by_vocab);
  Tensor hidden = states[0].dynamic_slice("k", position, 1).rename({{"k", "s"}});  // {s = 1, d}
  Tensor x = head_input(embed.gather("voc", token), hidden);
  auto [cos, sin] = nn::rope_tables(Tensor::iota(Shape(DType::i32, {{"s", 1}}), "s") + position,
                                    c.rope_inv_freq(), "hd");
  const std::string p = kHeadLayer;
  Tensor keys, values;
  x = x + full_attention(
              norm(x, p + "input_layernorm.weight", "d"), p + "self_attn.", cos, sin,
              [&](const Tensor& q, const Tensor& k, const Tensor& v) {
                keys = states[1].dynamic_update_slice(k.rename({{"s", "k"}}), {{"k", position}});
                values = states[2].dynamic_update_slice(v.rename({{"s", "k"}}), {{"k", position}});
                return nn::attention(q.rename({{"s", "q"}}), keys, values,
                                     {.causal = true, .offset = position})
                    .rename({{"q", "s"}});
              });
  x = x + mlp(norm(x, p + "post_attention_layernorm.weight", "d"), p);
  const Tensor out = norm(x, "mtp.norm.weight", "d");  // the head's hidden state {s = 1, d}
  Tensor logits = linear(out, lm_head(), "d", "voc", c.vocab_size, by_vocab);
  return {logits_output(logits, Logits::last),
          states[0].dynamic_update_slice(out.rename({{"s", "k"}}), {{"k", position + 1}}), keys,
          values};
}

// forward's step for one token of each of several conversations: the projections and the MLP
// run on all of them at once ({b, d}), the convolutions, the gated delta rule and attention on
// each conversation's own states.
std::vector<Tensor> Qwen3_5::decode_batch(const Tensor& tokens, const Tensor& positions,
                                          std::span<const std::vector<Tensor>> states) const {
  const Qwen3_5Config& c = config_;
  const int64_t d = c.hidden_size, batch = tokens.size("b");
  PRISM_CHECK(static_cast<int64_t>(states.size()) == batch,
              "qwen3_5: {} conversations' states for a batch of {}", states.size(), batch);
  const std::string& lm = c.prefix;
  const Sharding by_vocab = Sharding().split_if_divisible("voc", kModelAxis);
  Tensor embed =
      weight(lm + "embed_tokens.weight", {{"voc", c.vocab_size}, {"d", d}}, {}, by_vocab);
  const Tensor embedded = embed.gather("voc", tokens);  // {b, d}
  Tensor x = embedded;
  auto [cos, sin] = nn::rope_tables(positions, c.rope_inv_freq(), "hd");
  const Conversations batch_of(positions);
  const auto one = &Conversations::row;
  std::vector<std::vector<Tensor>> next(batch);
  size_t state = 0;  // the first state of layer l
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const std::string p = lm + "layers." + std::to_string(l) + ".";
    Tensor h = norm(x, p + "input_layernorm.weight", "d");
    if (c.layers[l] == Qwen3_5Config::Layer::linear_attention) {
      auto conv = [&](size_t part, const Tensor& proj, const Tensor& kernel) {
        std::vector<Tensor> ys;
        for (int64_t i = 0; i < batch; ++i) {
          nn::ShortConvResult r = nn::short_conv(one(proj, i, "s"), states[i][state + part], kernel,
                                                 std::nullopt, "s", "c", "tap");
          next[i].push_back(r.state);
          ys.push_back(r.y.rename({{"s", "b"}}));
        }
        return batch_of.join(ys);
      };
      auto rule = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                      const Tensor& beta) {
        std::vector<Tensor> outs;
        for (int64_t i = 0; i < batch; ++i) {
          auto r =
              nn::gated_delta_rule(one(q, i, "s"), one(k, i, "s"), one(v, i, "s"), one(g, i, "s"),
                                   one(beta, i, "s"), states[i][state + 3], {.chunk = kDeltaChunk});
          next[i].push_back(r.state);
          outs.push_back(r.out.rename({{"s", "b"}}));
        }
        return batch_of.join(outs);
      };
      x = x + linear_attention(h, p + "linear_attn.", std::nullopt, conv, rule);
      state += 4;
    } else {
      x = x + full_attention(
                  h, p + "self_attn.", cos, sin,
                  [&](const Tensor& q, const Tensor& k, const Tensor& v) {
                    std::vector<Tensor> outs;
                    for (int64_t i = 0; i < batch; ++i) {
                      Tensor keys = states[i][state].dynamic_update_slice(
                          one(k, i, "k"), {{"k", batch_of.position(i)}});
                      Tensor values = states[i][state + 1].dynamic_update_slice(
                          one(v, i, "k"), {{"k", batch_of.position(i)}});
                      next[i].push_back(keys);
                      next[i].push_back(values);
                      outs.push_back(nn::attention(one(q, i, "q"), keys, values,
                                                   {.causal = true, .offset = batch_of.position(i)})
                                         .rename({{"q", "b"}}));
                    }
                    return batch_of.join(outs);
                  });
      state += 2;
    }
    x = x + mlp(norm(x, p + "post_attention_layernorm.weight", "d"), p);
  }
  const Tensor hidden = norm(x, lm + "norm.weight", "d");  // {b, d}
  if (head_) {  // the draft head's states, as forward's window of one token leaves them
    const Tensor zero = Tensor::scalar(0, DType::i32);
    std::vector<Tensor> priors, at;
    for (int64_t i = 0; i < batch; ++i) {
      at.push_back(maximum(batch_of.position(i) - 1, zero));
      priors.push_back(states[i][state].dynamic_slice("k", at[i], 1).rename({{"k", "b"}}));
    }
    auto [k, v] = head_entries(embedded, batch_of.join(priors), positions);
    for (int64_t i = 0; i < batch; ++i) {
      next[i].push_back(states[i][state].dynamic_update_slice(one(hidden, i, "k"),
                                                              {{"k", batch_of.position(i)}}));
      next[i].push_back(states[i][state + 1].dynamic_update_slice(one(k, i, "k"), {{"k", at[i]}}));
      next[i].push_back(states[i][state + 2].dynamic_update_slice(one(v, i, "k"), {{"k", at[i]}}));
    }
  }
  Tensor logits = linear(hidden, lm_head(), "d", "voc", c.vocab_size, by_vocab);
  std::vector<Tensor> outputs{logits.convert(DType::f32)};  // {b, voc}
  for (auto& st : next) outputs.insert(outputs.end(), st.begin(), st.end());
  return outputs;
}

}  // namespace prism::models
