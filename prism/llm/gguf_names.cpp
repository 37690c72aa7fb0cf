#include "prism/llm/gguf_names.h"

#include <fmt/format.h>

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

}  // namespace prism::llm
