#!/usr/bin/env python3
"""Writes tiny random-weight Llama checkpoints in the exact Hugging Face layout, with
reference outputs from an independent PyTorch implementation of Hugging Face's Llama
semantics (modeling_llama.py, modeling_rope_utils.py: rms norm in f32, rotate-half rope with
llama3 frequency scaling, grouped-query attention, silu MLP, tied or untied lm_head).

Each checkpoint directory under tests/data/llama/ holds config.json,
generation_config.json, model.safetensors and reference.json (prompt ids, the greedy
continuation, and the first step's logits at a few ids). Tokenizer files are not copied: the
real Llama 3.1 ones are committed in tests/data/tokenizers/models/ and tests link them in.

  scripts/setup.sh --tools && .venv/bin/python tools/make_tiny_llama.py
"""
import math
import os

import torch

import tiny_lm

OUT = tiny_lm.fixture_root("llama")
VOCAB = 128256  # the Llama 3 tokenizer's

CHECKPOINTS = {
    # Llama 3.2 style: tied embeddings, llama3 rope scaling, bf16 weights.
    "tiny-bf16-tied": dict(
        dtype="bfloat16", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=True,
        rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=131072,
        rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        embed_std=0.05, seed=1),
    # Llama 3.1 style: separate lm_head, no rope scaling, f32 weights, head_dim implied.
    "tiny-f32": dict(
        dtype="float32", hidden_size=16, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=1, head_dim=None, tie_word_embeddings=False,
        rope_theta=10000.0, rms_norm_eps=1e-6, max_position_embeddings=2048,
        rope_scaling=None, embed_std=1.0, seed=2),
}
PROMPT = [128000, 791, 6864, 315, 9822, 374]  # "<|begin_of_text|>The capital of France is"
STEPS = 24


def inv_frequencies(cfg, head_dim):
    """The default rope's, scaled as rope_type "llama3" says where the config has it."""
    inv = tiny_lm.inv_frequencies(cfg["rope_theta"], head_dim)
    s = cfg["rope_scaling"]
    if not s:
        return inv
    factor, lo, hi = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / lo, old / hi
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def forward(cfg, w, ids):
    """Logits for every position of `ids` (a list), computed from scratch in the weights'
    dtype (norms and softmax in f32)."""
    d, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["head_dim"] or d // nh
    eps = cfg["rms_norm_eps"]
    dtype = w["model.embed_tokens.weight"].dtype
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    n = len(ids)
    cos, sin = tiny_lm.rope_cos_sin(inv_frequencies(cfg, hd), n, dtype)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = tiny_lm.rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(n, nh, hd).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(n, nkv, hd).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(n, nkv, hd).transpose(0, 1)
        q, k = tiny_lm.apply_rope(q, cos, sin), tiny_lm.apply_rope(k, cos, sin)
        a = tiny_lm.causal_attention(q, k, v)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = tiny_lm.rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        x = x + tiny_lm.swiglu(h, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                               w[p + "mlp.down_proj.weight"])
    x = tiny_lm.rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return (x @ head.T).float()


def make_weights(cfg):
    torch.manual_seed(cfg["seed"])
    dtype = getattr(torch, cfg["dtype"])
    d, f = cfg["hidden_size"], cfg["intermediate_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["head_dim"] or d // nh
    lin = tiny_lm.randn_fan_in
    # Small embeddings, as trained models have: with a tied head and large embeddings the
    # residual stream stays near the input token's embedding and greedy decoding repeats it.
    w = {"model.embed_tokens.weight": cfg["embed_std"] * torch.randn(VOCAB, d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(d)
        w[p + "self_attn.q_proj.weight"] = lin(nh * hd, d)
        w[p + "self_attn.k_proj.weight"] = lin(nkv * hd, d)
        w[p + "self_attn.v_proj.weight"] = lin(nkv * hd, d)
        w[p + "self_attn.o_proj.weight"] = lin(d, nh * hd)
        w[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(d)
        w[p + "mlp.gate_proj.weight"] = lin(f, d)
        w[p + "mlp.up_proj.weight"] = lin(f, d)
        w[p + "mlp.down_proj.weight"] = lin(d, f)
    w["model.norm.weight"] = 1 + 0.1 * torch.randn(d)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = lin(VOCAB, d)
    return {k: v.to(dtype) for k, v in w.items()}


def config_json(cfg):
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": VOCAB, "hidden_act": "silu", "attention_bias": False,
        "mlp_bias": False, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
        "torch_dtype": cfg["dtype"],
    }
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "tie_word_embeddings",
                "rope_theta", "rms_norm_eps", "max_position_embeddings", "rope_scaling"):
        config[key] = cfg[key]
    if cfg["head_dim"]:
        config["head_dim"] = cfg["head_dim"]
    return config


def main():
    torch.set_num_threads(1)
    for name, cfg in CHECKPOINTS.items():
        out = os.path.join(OUT, name)
        w = make_weights(cfg)
        result = tiny_lm.greedy(lambda ids: forward(cfg, w, ids), PROMPT, STEPS)
        tiny_lm.write_checkpoint(
            out, config_json(cfg),
            {"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
             "do_sample": False}, w)
        probe = tiny_lm.probe_ids(result.first_logits, 5, [0, 1, 128000])
        tiny_lm.write_json(os.path.join(out, "reference.json"),
                           tiny_lm.reference_json(PROMPT, result, probe), indent=1)
        print(name, "greedy:", result.ids)


if __name__ == "__main__":
    main()
