#!/usr/bin/env python3
"""Writes tiny random-weight LFM 2 / 2.5 checkpoints in the exact Hugging Face layout, with
reference outputs from an independent PyTorch implementation of Hugging Face's Lfm2 semantics
(modeling_lfm2.py, configuration_lfm2.py), computed in float32 from the stored weights:

- every layer: x += op(operator_norm(x)); x += w2(silu(w1(h)) * w3(h)), h = ffn_norm(x);
  after the last layer the `embedding_norm` RMSNorm, then the (tied) head;
- a "conv" layer: in_proj gives B, C and x (in that order, each hidden wide), the depthwise
  causal convolution of B*x over the last conv_L_cache positions, times C, then out_proj;
- a "full_attention" layer: grouped-query attention with per-head RMSNorms of q and k
  (q_layernorm, k_layernorm) before rotate-half rope, then out_proj;
- the MLP width from block_ff_dim by block_auto_adjust_ff_dim: int(2 * ff / 3), times
  block_ffn_dim_multiplier, rounded up to block_multiple_of.

Each checkpoint directory under tests/data/lfm2/ holds config.json (the fields the published
LFM2.5-1.2B config.json has, sizes shrunk), generation_config.json, model.safetensors and
reference.json: prompt ids, 24 greedy ids, and the prompt's last-position logits at a spread
of ids. No tokenizer files: LFM's cannot be had offline.

  scripts/setup.sh --tools && .venv/bin/python tools/make_tiny_lfm2.py
"""
import os

import torch

import tiny_lm

OUT = tiny_lm.fixture_root("lfm2")
VOCAB = 65536  # the LFM 2 tokenizer's

CHECKPOINTS = {
    # LFM2.5-1.2B style: tied embeddings, conv kernel 3, no biases, the MLP width derived
    # from block_ff_dim (96 -> 64 -> rounded up to 72), attention in 2 of 6 layers.
    "tiny-bf16-tied": dict(
        hidden_size=32, block_ff_dim=96, block_multiple_of=24, block_ffn_dim_multiplier=1.0,
        block_auto_adjust_ff_dim=True, num_attention_heads=4, num_key_value_heads=2,
        layer_types=["conv", "conv", "full_attention", "conv", "full_attention", "conv"],
        conv_L_cache=3, conv_bias=False, tie=True, rope={"rope_theta": 1000000.0},
        norm_eps=1e-5, max_position_embeddings=128000, embed_std=0.05, seed=1),
    # The other paths: untied head, biases in the conv block, kernel 4, the MLP width as
    # given, the rope base in rope_parameters, attention first, multi-query attention.
    "tiny-bf16-untied": dict(
        hidden_size=16, block_ff_dim=40, block_multiple_of=256, block_ffn_dim_multiplier=1.0,
        block_auto_adjust_ff_dim=False, num_attention_heads=2, num_key_value_heads=1,
        layer_types=["full_attention", "conv", "conv", "full_attention", "conv"],
        conv_L_cache=4, conv_bias=True, tie=False,
        rope={"rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}},
        norm_eps=1e-5, max_position_embeddings=4096, embed_std=0.5, seed=2),
}
# "<|startoftext|><|im_start|>user\n" ... "<|im_end|>\n<|im_start|>assistant\n" in shape:
# bos 1, <|im_start|> 6, <|im_end|> 7, with made-up text ids between.
PROMPT = [1, 6, 6423, 708, 1098, 6520, 803, 5027, 1170, 7, 708, 6, 64015, 708]
STEPS = 24


def mlp_width(cfg):
    """configuration_lfm2 / Lfm2MLP: block_ff_dim adjusted as the config says."""
    width = cfg["block_ff_dim"]
    if cfg["block_auto_adjust_ff_dim"]:
        width = int(2 * width / 3)
        if cfg["block_ffn_dim_multiplier"] is not None:
            width = int(cfg["block_ffn_dim_multiplier"] * width)
            m = cfg["block_multiple_of"]
            width = m * ((width + m - 1) // m)
    return width


def rope_theta(cfg):
    r = cfg["rope"]
    return r["rope_parameters"]["rope_theta"] if "rope_parameters" in r else r["rope_theta"]


def head_dim(cfg):
    return cfg["hidden_size"] // cfg["num_attention_heads"]


def linear(x, w, p, name, bias):
    y = x @ w[p + name + ".weight"].T
    return y + w[p + name + ".bias"] if bias else y


def short_conv(cfg, w, p, h):
    """The gated short convolution of one layer over all positions of h {n, d}."""
    d, bias = cfg["hidden_size"], cfg["conv_bias"]
    bcx = linear(h, w, p, "conv.in_proj", bias)  # {n, 3d}
    b, c, x = bcx[:, :d], bcx[:, d:2 * d], bcx[:, 2 * d:]
    out = tiny_lm.causal_conv1d(b * x, w[p + "conv.conv.weight"][:, 0, :])  # kernel {d, L}
    if bias:
        out = out + w[p + "conv.conv.bias"]
    return linear(c * out, w, p, "conv.out_proj", bias)


def attention(cfg, w, p, h, cos, sin):
    nh, nkv, hd, eps = (cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg),
                        cfg["norm_eps"])
    n = h.shape[0]
    q = (h @ w[p + "self_attn.q_proj.weight"].T).view(n, nh, hd)
    k = (h @ w[p + "self_attn.k_proj.weight"].T).view(n, nkv, hd)
    v = (h @ w[p + "self_attn.v_proj.weight"].T).view(n, nkv, hd)
    # Per-head RMSNorms of q and k, before the rope.
    q = tiny_lm.rms_norm(q, w[p + "self_attn.q_layernorm.weight"], eps).transpose(0, 1)
    k = tiny_lm.rms_norm(k, w[p + "self_attn.k_layernorm.weight"], eps).transpose(0, 1)
    v = v.transpose(0, 1)
    q, k = tiny_lm.apply_rope(q, cos, sin), tiny_lm.apply_rope(k, cos, sin)
    a = tiny_lm.causal_attention(q, k, v)
    return a @ w[p + "self_attn.out_proj.weight"].T


def forward(cfg, w, ids):
    """Logits for every position of `ids` (a list), computed from scratch in float32."""
    eps = cfg["norm_eps"]
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    cos, sin = tiny_lm.rope_cos_sin(tiny_lm.inv_frequencies(rope_theta(cfg), head_dim(cfg)),
                                    len(ids))
    for i, kind in enumerate(cfg["layer_types"]):
        p = f"model.layers.{i}."
        h = tiny_lm.rms_norm(x, w[p + "operator_norm.weight"], eps)
        x = x + (short_conv(cfg, w, p, h) if kind == "conv" else attention(cfg, w, p, h, cos, sin))
        h = tiny_lm.rms_norm(x, w[p + "ffn_norm.weight"], eps)
        x = x + tiny_lm.swiglu(h, w[p + "feed_forward.w1.weight"], w[p + "feed_forward.w3.weight"],
                               w[p + "feed_forward.w2.weight"])
    x = tiny_lm.rms_norm(x, w["model.embedding_norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie"] else w["lm_head.weight"]
    return x @ head.T


def make_weights(cfg):
    torch.manual_seed(cfg["seed"])
    d, f, L = cfg["hidden_size"], mlp_width(cfg), cfg["conv_L_cache"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    lin = tiny_lm.randn_fan_in
    # Small embeddings, as trained models have: with a tied head and large embeddings the
    # residual stream stays near the input token's embedding and greedy decoding repeats it.
    w = {"model.embed_tokens.weight": cfg["embed_std"] * torch.randn(VOCAB, d)}
    for i, kind in enumerate(cfg["layer_types"]):
        p = f"model.layers.{i}."
        w[p + "operator_norm.weight"] = 1 + 0.1 * torch.randn(d)
        if kind == "conv":
            w[p + "conv.in_proj.weight"] = lin(3 * d, d)
            w[p + "conv.conv.weight"] = lin(d, 1, L)
            w[p + "conv.out_proj.weight"] = lin(d, d)
            if cfg["conv_bias"]:
                w[p + "conv.in_proj.bias"] = 0.5 * torch.randn(3 * d)
                w[p + "conv.conv.bias"] = 0.5 * torch.randn(d)
                w[p + "conv.out_proj.bias"] = 0.5 * torch.randn(d)
        else:
            w[p + "self_attn.q_proj.weight"] = lin(nh * hd, d)
            w[p + "self_attn.k_proj.weight"] = lin(nkv * hd, d)
            w[p + "self_attn.v_proj.weight"] = lin(nkv * hd, d)
            w[p + "self_attn.out_proj.weight"] = lin(d, nh * hd)
            w[p + "self_attn.q_layernorm.weight"] = 1 + 0.1 * torch.randn(hd)
            w[p + "self_attn.k_layernorm.weight"] = 1 + 0.1 * torch.randn(hd)
        w[p + "ffn_norm.weight"] = 1 + 0.1 * torch.randn(d)
        w[p + "feed_forward.w1.weight"] = lin(f, d)
        w[p + "feed_forward.w3.weight"] = lin(f, d)
        w[p + "feed_forward.w2.weight"] = lin(d, f)
    w["model.embedding_norm.weight"] = 1 + 0.1 * torch.randn(d)
    if not cfg["tie"]:
        w["lm_head.weight"] = lin(VOCAB, d)
    return {k: v.to(torch.bfloat16) for k, v in w.items()}


def config_json(cfg):
    """The fields of the published LFM2.5-1.2B config.json, sizes from cfg."""
    d = cfg["hidden_size"]
    config = {
        "architectures": ["Lfm2ForCausalLM"],
        "block_auto_adjust_ff_dim": cfg["block_auto_adjust_ff_dim"],
        "block_dim": d,
        "block_ff_dim": cfg["block_ff_dim"],
        "block_ffn_dim_multiplier": cfg["block_ffn_dim_multiplier"],
        "block_mlp_init_scale": 1.0,
        "block_multiple_of": cfg["block_multiple_of"],
        "block_norm_eps": cfg["norm_eps"],
        "block_out_init_scale": 1.0,
        "block_use_swiglu": True,
        "block_use_xavier_init": True,
        "bos_token_id": 1,
        "conv_L_cache": cfg["conv_L_cache"],
        "conv_bias": cfg["conv_bias"],
        "conv_dim": d,
        "conv_dim_out": d,
        "conv_use_xavier_init": True,
        "eos_token_id": 7,
        "hidden_size": d,
        "initializer_range": 0.02,
        "intermediate_size": cfg["block_ff_dim"],
        "layer_types": cfg["layer_types"],
        "max_position_embeddings": cfg["max_position_embeddings"],
        "model_type": "lfm2",
        "norm_eps": cfg["norm_eps"],
        "num_attention_heads": cfg["num_attention_heads"],
        "num_heads": cfg["num_attention_heads"],
        "num_hidden_layers": len(cfg["layer_types"]),
        "num_key_value_heads": cfg["num_key_value_heads"],
        "pad_token_id": 0,
        "tie_embedding": cfg["tie"],
        "tie_word_embeddings": cfg["tie"],
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_pos_enc": True,
        "vocab_size": VOCAB,
    }
    config.update(cfg["rope"])
    return dict(sorted(config.items()))


def main():
    torch.set_num_threads(2)
    for name, cfg in CHECKPOINTS.items():
        out = os.path.join(OUT, name)
        w = make_weights(cfg)
        wf = {k: v.float() for k, v in w.items()}
        result = tiny_lm.greedy(lambda ids: forward(cfg, wf, ids), PROMPT, STEPS)
        tiny_lm.write_checkpoint(
            out, config_json(cfg),
            {"bos_token_id": 1, "eos_token_id": 7, "pad_token_id": 0, "do_sample": False}, w)
        # The logits at the top ten, the special ids, and every 257th id (a spread over the
        # whole vocabulary).
        probe = tiny_lm.probe_ids(result.first_logits, 10, [0, 1, 6, 7, *range(0, VOCAB, 257)])
        reference = tiny_lm.reference_json(
            PROMPT, result, probe, "tools/make_tiny_lfm2.py (independent PyTorch, float32)")
        tiny_lm.write_json(os.path.join(out, "reference.json"), reference, indent=0)
        print(name, "mlp width", mlp_width(cfg), "greedy:", result.ids)


if __name__ == "__main__":
    main()
