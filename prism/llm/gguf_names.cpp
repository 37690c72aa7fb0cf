#include "prism/llm/gguf_names.h"

#include <fmt/format.h>

#include <algorithm>

namespace prism::llm {

std::vector<GgufTensorName> llama_gguf_names(const models::LlamaConfig& c) {
  const int64_t d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim;
  std::vector<GgufTensorName> out;
  auto add = [&](std::string hf, std::string gguf, std::vector<int64_t> shape,
                 int64_t rope_heads = 0) {
    out.push_back({std::move(hf), std::move(gguf), std::move(shape), {}, false, rope_heads});
  };
  add("model.embed_tokens.weight", "token_embd.weight", {c.vocab_size, d});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", l);
    add(p + "input_layernorm.weight", b + "attn_norm.weight", {d});
    add(p + "self_attn.q_proj.weight", b + "attn_q.weight", {c.num_heads * hd, d}, c.num_heads);
    add(p + "self_attn.k_proj.weight", b + "attn_k.weight", {c.num_kv_heads * hd, d},
        c.num_kv_heads);
    add(p + "self_attn.v_proj.weight", b + "attn_v.weight", {c.num_kv_heads * hd, d});
    add(p + "self_attn.o_proj.weight", b + "attn_output.weight", {d, c.num_heads * hd});
    add(p + "post_attention_layernorm.weight", b + "ffn_norm.weight", {d});
    add(p + "mlp.gate_proj.weight", b + "ffn_gate.weight", {f, d});
    add(p + "mlp.up_proj.weight", b + "ffn_up.weight", {f, d});
    add(p + "mlp.down_proj.weight", b + "ffn_down.weight", {d, f});
  }
  add("model.norm.weight", "output_norm.weight", {d});
  if (!c.tie_word_embeddings) add("lm_head.weight", "output.weight", {c.vocab_size, d});
  return out;
}

std::vector<GgufTensorName> lfm2_gguf_names(const models::Lfm2Config& c) {
  const int64_t d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim;
  std::vector<GgufTensorName> out;
  auto add = [&](std::string hf, std::string gguf, std::vector<int64_t> shape) {
    out.push_back({std::move(hf), std::move(gguf), std::move(shape), {}, false, 0});
  };
  add("model.embed_tokens.weight", "token_embd.weight", {c.vocab_size, d});
  // The norm after the last block, which llama.cpp names after the embedding as Hugging Face
  // does (embedding_norm).
  add("model.embedding_norm.weight", "token_embd_norm.weight", {d});
  for (int64_t l = 0; l < c.num_layers(); ++l) {
    const std::string p = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", l);
    add(p + "operator_norm.weight", b + "attn_norm.weight", {d});
    add(p + "ffn_norm.weight", b + "ffn_norm.weight", {d});
    add(p + "feed_forward.w1.weight", b + "ffn_gate.weight", {f, d});
    add(p + "feed_forward.w3.weight", b + "ffn_up.weight", {f, d});
    add(p + "feed_forward.w2.weight", b + "ffn_down.weight", {d, f});
    if (c.layers[l] == models::Lfm2Config::Layer::conv) {
      add(p + "conv.in_proj.weight", b + "shortconv.in_proj.weight", {3 * d, d});
      add(p + "conv.out_proj.weight", b + "shortconv.out_proj.weight", {d, d});
      add(p + "conv.conv.weight", b + "shortconv.conv.weight", {d, c.conv_kernel});
      out.back().hf_shape = {d, 1, c.conv_kernel};
      out.back().f32 = true;
      if (c.conv_bias) {
        add(p + "conv.in_proj.bias", b + "shortconv.in_proj.bias", {3 * d});
        add(p + "conv.out_proj.bias", b + "shortconv.out_proj.bias", {d});
        add(p + "conv.conv.bias", b + "shortconv.conv.bias", {d});
      }
    } else {
      add(p + "self_attn.q_proj.weight", b + "attn_q.weight", {c.num_heads * hd, d});
      add(p + "self_attn.k_proj.weight", b + "attn_k.weight", {c.num_kv_heads * hd, d});
      add(p + "self_attn.v_proj.weight", b + "attn_v.weight", {c.num_kv_heads * hd, d});
      add(p + "self_attn.out_proj.weight", b + "attn_output.weight", {d, c.num_heads * hd});
      add(p + "self_attn.q_layernorm.weight", b + "attn_q_norm.weight", {hd});
      add(p + "self_attn.k_layernorm.weight", b + "attn_k_norm.weight", {hd});
    }
  }
  if (!c.tie_word_embeddings) add("lm_head.weight", "output.weight", {c.vocab_size, d});
  return out;
}

std::vector<int64_t> qwen35_value_heads(int64_t key_heads, int64_t value_heads, int64_t unit,
                                        int64_t skip) {
  if (key_heads == value_heads) return {};
  const int64_t per_key = value_heads / key_heads;
  std::vector<int64_t> stored(skip + value_heads * unit);
  for (int64_t i = 0; i < skip; ++i) stored[i] = i;
  for (int64_t g = 0; g < key_heads; ++g) {
    for (int64_t j = 0; j < per_key; ++j) {
      for (int64_t e = 0; e < unit; ++e) {
        stored[skip + (g * per_key + j) * unit + e] = skip + (j * key_heads + g) * unit + e;
      }
    }
  }
  return stored;
}

namespace {

using Stored = io::StoredTensor::Stored;

// A decoder layer's tensors (prefix p in the checkpoint, b in the file) of a Qwen 3.5 of
// config c: full attention or linear attention (Gated DeltaNet).
void qwen35_layer(const models::Qwen3_5Config& c, const std::string& p, const std::string& b,
                  bool full_attention, std::vector<GgufTensorName>& out) {
  const int64_t d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim;
  auto add = [&](const std::string& hf, const std::string& gguf, std::vector<int64_t> shape,
                 Stored stored = Stored::as_is) -> GgufTensorName& {
    GgufTensorName& t = out.emplace_back();
    t.hf = p + hf;
    t.gguf = b + gguf;
    t.shape = std::move(shape);
    t.stored_as = stored;
    return t;
  };
  add("input_layernorm.weight", "attn_norm.weight", {d}, Stored::plus_one);
  add("post_attention_layernorm.weight", "post_attention_norm.weight", {d}, Stored::plus_one);
  add("mlp.gate_proj.weight", "ffn_gate.weight", {f, d});
  add("mlp.up_proj.weight", "ffn_up.weight", {f, d});
  add("mlp.down_proj.weight", "ffn_down.weight", {d, f});
  if (full_attention) {
    // Each head's query, then its output gate.
    add("self_attn.q_proj.weight", "attn_q.weight", {c.num_heads * 2 * hd, d});
    add("self_attn.k_proj.weight", "attn_k.weight", {c.num_kv_heads * hd, d});
    add("self_attn.v_proj.weight", "attn_v.weight", {c.num_kv_heads * hd, d});
    add("self_attn.o_proj.weight", "attn_output.weight", {d, c.num_heads * hd});
    add("self_attn.q_norm.weight", "attn_q_norm.weight", {hd}, Stored::plus_one);
    add("self_attn.k_norm.weight", "attn_k_norm.weight", {hd}, Stored::plus_one);
    return;
  }
  const int64_t nk = c.linear_key_heads, nv = c.linear_value_heads, dv = c.linear_value_dim;
  const int64_t keys = nk * c.linear_key_dim, values = nv * dv, channels = 2 * keys + values;
  add("linear_attn.in_proj_qkv.weight", "attn_qkv.weight", {channels, d}).row_order =
      qwen35_value_heads(nk, nv, dv, 2 * keys);
  GgufTensorName& conv =
      add("linear_attn.conv1d.weight", "ssm_conv1d.weight", {channels, c.conv_kernel});
  conv.row_order = qwen35_value_heads(nk, nv, dv, 2 * keys);
  conv.hf_shape = {channels, 1, c.conv_kernel};
  conv.f32 = true;
  add("linear_attn.in_proj_z.weight", "attn_gate.weight", {values, d}).row_order =
      qwen35_value_heads(nk, nv, dv);
  add("linear_attn.in_proj_a.weight", "ssm_alpha.weight", {nv, d}).row_order =
      qwen35_value_heads(nk, nv, 1);
  add("linear_attn.in_proj_b.weight", "ssm_beta.weight", {nv, d}).row_order =
      qwen35_value_heads(nk, nv, 1);
  add("linear_attn.dt_bias", "ssm_dt.bias", {nv}).column_order = qwen35_value_heads(nk, nv, 1);
  add("linear_attn.A_log", "ssm_a", {nv}, Stored::negated_exp).column_order =
      qwen35_value_heads(nk, nv, 1);
  add("linear_attn.norm.weight", "ssm_norm.weight", {dv});
  add("linear_attn.out_proj.weight", "ssm_out.weight", {d, values}).column_order =
      qwen35_value_heads(nk, nv, dv);
}

}  // namespace

std::vector<GgufTensorName> qwen35_gguf_names(const models::Qwen3_5Config& c) {
  const int64_t d = c.hidden_size;
  std::vector<GgufTensorName> out;
  const std::string& lm = c.prefix;
  out.push_back({lm + "embed_tokens.weight", "token_embd.weight", {c.vocab_size, d}});
  for (int64_t l = 0; l < static_cast<int64_t>(c.layers.size()); ++l) {
    qwen35_layer(c, fmt::format("{}layers.{}.", lm, l), fmt::format("blk.{}.", l),
                 c.layers[l] == models::Qwen3_5Config::Layer::full_attention, out);
  }
  out.push_back({lm + "norm.weight", "output_norm.weight", {d}});
  out.back().stored_as = Stored::plus_one;
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", "output.weight", {c.vocab_size, d}});
  return out;
}

std::vector<GgufTensorName> qwen35_mtp_gguf_names(const models::Qwen3_5Config& c,
                                                  int64_t mtp_layers) {
  const int64_t layers = static_cast<int64_t>(c.layers.size());
  const int64_t d = c.hidden_size;
  std::vector<GgufTensorName> out;
  // The layers first, each a full-attention layer.
  for (int64_t i = 0; i < mtp_layers; ++i) {
    qwen35_layer(c, fmt::format("mtp.layers.{}.", i), fmt::format("blk.{}.", layers + i), true,
                 out);
  }
  const std::string b = fmt::format("blk.{}.nextn.", layers);
  const std::pair<const char*, const char*> rest[] = {{"fc", "eh_proj"},
                                                      {"pre_fc_norm_embedding", "enorm"},
                                                      {"pre_fc_norm_hidden", "hnorm"},
                                                      {"norm", "shared_head_norm"}};
  for (const auto& [hf, gguf] : rest) {
    GgufTensorName& t = out.emplace_back();
    t.hf = fmt::format("mtp.{}.weight", hf);
    t.gguf = b + gguf + ".weight";
    if (std::string_view(hf) == "fc") {
      t.shape = {d, 2 * d};
    } else {
      t.shape = {d};
      t.stored_as = Stored::plus_one;
    }
  }
  return out;
}

std::vector<GgufTensorName> qwen35_mtp_gguf_names(const models::Qwen3_5Config& c,
                                                  const io::Store& store) {
  const std::vector<std::string> names = store.names();
  int64_t mtp_layers = 0;
  while (std::any_of(names.begin(), names.end(), [&](const std::string& name) {
    return name.starts_with(fmt::format("mtp.layers.{}.", mtp_layers));
  })) {
    ++mtp_layers;
  }
  std::vector<GgufTensorName> out;
  for (GgufTensorName& t : qwen35_mtp_gguf_names(c, mtp_layers)) {
    if (store.contains(t.hf)) out.push_back(std::move(t));
  }
  return out;
}

}  // namespace prism::llm
