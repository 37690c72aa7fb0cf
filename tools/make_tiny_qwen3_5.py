#!/usr/bin/env python3
"""Writes a tiny random-weight Qwen 3.5 checkpoint in the exact Hugging Face layout of the
published ones (the multimodal composite: config.json with text_config and vision_config,
weights model.language_model.* beside a vision tower model.visual.* and multi-token
prediction tensors mtp.* that a text run skips, A_log stored in F32 beside BF16 tensors),
with reference outputs from an independent PyTorch implementation of Hugging Face's
Qwen 3.5 text semantics (modeling_qwen3_5.py):

- RMSNorms scale by (1 + w), computed in f32; the gated norm of the linear-attention output
  scales by w and multiplies by silu(z);
- Gated DeltaNet layers: one projection to q, k, v, a depthwise causal convolution over
  them (kernel linear_conv_kernel_dim, no bias) and silu; q and k L2-normalized (eps 1e-6),
  q scaled by 1/sqrt(key dim); beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias);
  each key head serves num_v_heads / num_k_heads consecutive value heads; the state
  S {dk, dv} per value head follows S <- exp(g) S; S <- S + k (beta (v - S^T k))^T and the
  output is S^T q. Written here as that recurrence, token by token (Hugging Face computes a
  chunked form of it);
- full-attention layers: q_proj gives per head a query and a gate, q/k RMSNorm over the head
  dim, rotary embedding on the first partial_rotary_factor of each head (rotate-half), GQA,
  output multiplied by sigmoid(gate);
- silu MLP; tied embeddings.

Everything is computed in f32 from the stored weights, as transformers does when asked for
float32. The directory tests/data/qwen3_5/<name>/ gets config.json, generation_config.json,
model.safetensors and reference.json (prompt ids, the greedy continuation, the first step's
logits at a few ids) and mtp_guesses.json (the multi-token prediction head's greedy
guesses at two points of that continuation, mtp_guesses). Tokenizer files are not copied: the Qwen3 tokenizer is committed in
tests/data/tokenizers/models/ and tests link it in.

  scripts/setup.sh --tools && .venv/bin/python tools/make_tiny_qwen3_5.py
"""
import math
import os

import torch
import torch.nn.functional as F

import tiny_lm

OUT = tiny_lm.fixture_root("qwen3_5")
VOCAB = 151936  # the Qwen3 tokenizer's embedding rows
EOS = 151645  # <|im_end|>

# Qwen3.5-0.8B's shape, shrunk: two layer types interleaved, grouped attention heads, grouped
# value heads in the linear layers, partial rotary (8 of 32 dims), tied embeddings.
CHECKPOINTS = {
    "tiny-bf16-tied": dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=4, full_attention_interval=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, rope_theta=10000000.0,
        partial_rotary_factor=0.25, mrope_section=[2, 1, 1], max_position_embeddings=262144,
        tie_word_embeddings=True, embed_std=0.5, seed=4),
    # The larger models' traits: a separate lm_head, no key-head sharing, key and value heads
    # of different widths; with a kernel of 3 and half the head rotated instead.
    "tiny-bf16-untied": dict(
        hidden_size=8, intermediate_size=24, num_hidden_layers=3, full_attention_interval=3,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2,
        linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=8,
        linear_conv_kernel_dim=3, rms_norm_eps=1e-6, rope_theta=10000000.0,
        partial_rotary_factor=0.5, mrope_section=[2, 1, 1], max_position_embeddings=262144,
        tie_word_embeddings=False, embed_std=0.5, seed=7),
}
# "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
PROMPT = [151644, 872, 198, 3838, 374, 279, 6722, 315, 9625, 30, 151645, 198, 151644, 77091, 198]
STEPS = 24
MTP_STEPS = 3  # the multi-token prediction head's guesses in a row


def layer_types(cfg):
    n = cfg["full_attention_interval"]
    return ["linear_attention" if (i + 1) % n else "full_attention"
            for i in range(cfg["num_hidden_layers"])]


def l2_normalize(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def gated_delta_net(cfg, w, p, h):
    """One linear-attention mixer over the whole sequence h {n, d}, from a zero state."""
    n = h.shape[0]
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    qkv = h @ w[p + "in_proj_qkv.weight"].T  # {n, 2 nk dk + nv dv}
    z = (h @ w[p + "in_proj_z.weight"].T).view(n, nv, dv)
    b = h @ w[p + "in_proj_b.weight"].T
    a = h @ w[p + "in_proj_a.weight"].T
    conv = F.silu(tiny_lm.causal_conv1d(qkv, w[p + "conv1d.weight"][:, 0, :]))
    q = conv[:, :nk * dk].view(n, nk, dk)
    k = conv[:, nk * dk:2 * nk * dk].view(n, nk, dk)
    v = conv[:, 2 * nk * dk:].view(n, nv, dv)
    beta = torch.sigmoid(b)
    g = -torch.exp(w[p + "A_log"]) * F.softplus(a + w[p + "dt_bias"])
    q = l2_normalize(q) / math.sqrt(dk)
    k = l2_normalize(k)
    group = nv // nk
    out = torch.zeros(n, nv, dv)
    for head in range(nv):
        s = torch.zeros(dk, dv)
        kh = head // group  # consecutive value heads share a key head
        for t in range(n):
            s = s * torch.exp(g[t, head])
            kt = k[t, kh]
            delta = beta[t, head] * (v[t, head] - kt @ s)
            s = s + torch.outer(kt, delta)
            out[t, head] = q[t, kh] @ s
    # Gated RMSNorm over each value head: scales by w (not 1 + w), then silu(z).
    normed = tiny_lm.rms_norm(out, w[p + "norm.weight"], cfg["rms_norm_eps"]) * F.silu(z)
    return normed.reshape(n, nv * dv) @ w[p + "out_proj.weight"].T


def attention(cfg, w, p, h):
    n = h.shape[0]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    # q_proj gives per head a query and an output gate.
    qg = (h @ w[p + "q_proj.weight"].T).view(n, nh, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:].reshape(n, nh * hd)
    k = (h @ w[p + "k_proj.weight"].T).view(n, nkv, hd)
    v = (h @ w[p + "v_proj.weight"].T).view(n, nkv, hd)
    q = tiny_lm.rms_norm_one_plus(q, w[p + "q_norm.weight"], eps).transpose(0, 1)  # {h, n, hd}
    k = tiny_lm.rms_norm_one_plus(k, w[p + "k_norm.weight"], eps).transpose(0, 1)
    v = v.transpose(0, 1)
    # Partial rotary: the rope turns the first `rot` dims of each head, the rest pass.
    rot = int(hd * cfg["partial_rotary_factor"])
    cos, sin = tiny_lm.rope_cos_sin(tiny_lm.inv_frequencies(cfg["rope_theta"], rot), n)
    q = torch.cat([tiny_lm.apply_rope(q[..., :rot], cos, sin), q[..., rot:]], dim=-1)
    k = torch.cat([tiny_lm.apply_rope(k[..., :rot], cos, sin), k[..., rot:]], dim=-1)
    a = tiny_lm.causal_attention(q, k, v)
    return (a * torch.sigmoid(gate)) @ w[p + "o_proj.weight"].T


def hidden_states(cfg, w, ids):
    """The final hidden states (after the last norm) of every position of `ids` (a list),
    computed from scratch in f32 from f32 weights `w`."""
    eps = cfg["rms_norm_eps"]
    lm = "model.language_model."
    x = w[lm + "embed_tokens.weight"][torch.tensor(ids)]
    for i, kind in enumerate(layer_types(cfg)):
        p = f"{lm}layers.{i}."
        h = tiny_lm.rms_norm_one_plus(x, w[p + "input_layernorm.weight"], eps)
        if kind == "linear_attention":
            x = x + gated_delta_net(cfg, w, p + "linear_attn.", h)
        else:
            x = x + attention(cfg, w, p + "self_attn.", h)
        h = tiny_lm.rms_norm_one_plus(x, w[p + "post_attention_layernorm.weight"], eps)
        x = x + tiny_lm.swiglu(h, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                               w[p + "mlp.down_proj.weight"])
    return tiny_lm.rms_norm_one_plus(x, w[lm + "norm.weight"], eps)


def lm_head(cfg, w):
    return w["model.language_model.embed_tokens.weight" if cfg["tie_word_embeddings"]
             else "lm_head.weight"]


def forward(cfg, w, ids):
    """Logits for every position of `ids` (a list), computed from scratch in f32."""
    w = {k: v.float() for k, v in w.items()}
    return hidden_states(cfg, w, ids) @ lm_head(cfg, w).T


def mtp_guesses(cfg, w, ids, next_id, steps):
    """The multi-token prediction head's greedy guesses after `ids` and `next_id` (the token
    after them), as vLLM's and llama.cpp's Qwen 3.5 MTP runs it: row j of the head pairs the
    model's final hidden state at position j with the embedding of the token at j + 1
    (normalized by pre_fc_norm_hidden and pre_fc_norm_embedding, the embedding first), mtp.fc
    to the model's width, one full-attention decoder layer over the rows (causal, rope
    position j), mtp.norm, the model's LM head; each guess joins as the next row with the
    head's own hidden state (after mtp.norm) in place of the model's. Returns the guesses and
    the smallest top-2 logit margin among them."""
    w = {k: v.float() for k, v in w.items()}
    eps = cfg["rms_norm_eps"]
    norm = tiny_lm.rms_norm_one_plus
    embed = w["model.language_model.embed_tokens.weight"]
    hidden = list(hidden_states(cfg, w, ids))
    tokens = list(ids[1:]) + [next_id]
    p = "mtp.layers.0."
    guesses, margin = [], float("inf")
    with torch.no_grad():
        for _ in range(steps):
            e = norm(embed[torch.tensor(tokens)], w["mtp.pre_fc_norm_embedding.weight"], eps)
            h = norm(torch.stack(hidden), w["mtp.pre_fc_norm_hidden.weight"], eps)
            x = torch.cat([e, h], dim=-1) @ w["mtp.fc.weight"].T
            x = x + attention(cfg, w, p + "self_attn.",
                              norm(x, w[p + "input_layernorm.weight"], eps))
            x = x + tiny_lm.swiglu(norm(x, w[p + "post_attention_layernorm.weight"], eps),
                                   w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                                   w[p + "mlp.down_proj.weight"])
            out = norm(x, w["mtp.norm.weight"], eps)
            logits = out[-1] @ lm_head(cfg, w).T
            top = logits.topk(2).values
            margin = min(margin, float(top[0] - top[1]))
            guesses.append(int(logits.argmax()))
            tokens.append(guesses[-1])
            hidden.append(out[-1])
    return guesses, margin


VISION = dict(depth=1, hidden_size=16, hidden_act="gelu_pytorch_tanh", intermediate_size=32,
              num_heads=2, in_channels=3, patch_size=2, spatial_merge_size=2,
              temporal_patch_size=2, num_position_embeddings=4,
              initializer_range=0.02, model_type="qwen3_5")


def make_weights(cfg):
    torch.manual_seed(cfg["seed"])
    d, f = cfg["hidden_size"], cfg["intermediate_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    kernel = cfg["linear_conv_kernel_dim"]
    lm = "model.language_model."
    lin = tiny_lm.randn_fan_in
    # Small embeddings, as trained models have: with a tied head and large embeddings the
    # residual stream stays near the input token's embedding and greedy decoding repeats it.
    w = {lm + "embed_tokens.weight": cfg["embed_std"] * torch.randn(VOCAB, d)}
    for i, kind in enumerate(layer_types(cfg)):
        p = f"{lm}layers.{i}."
        w[p + "input_layernorm.weight"] = 0.1 * torch.randn(d)  # used as 1 + w
        if kind == "linear_attention":
            q = p + "linear_attn."
            channels = 2 * nk * dk + nv * dv
            w[q + "in_proj_qkv.weight"] = lin(channels, d)
            w[q + "in_proj_z.weight"] = lin(nv * dv, d)
            w[q + "in_proj_b.weight"] = lin(nv, d)
            w[q + "in_proj_a.weight"] = lin(nv, d)
            w[q + "conv1d.weight"] = lin(channels, 1, kernel)
            w[q + "dt_bias"] = 1 + 0.5 * torch.randn(nv)
            # Decay rates from slow to fast, as trained models have; kept in F32 as published.
            w[q + "A_log"] = torch.log(torch.empty(nv).uniform_(0.05, 8))
            w[q + "norm.weight"] = 1 + 0.1 * torch.randn(dv)  # used as w
            w[q + "out_proj.weight"] = lin(d, nv * dv)
        else:
            q = p + "self_attn."
            w[q + "q_proj.weight"] = lin(2 * nh * hd, d)
            w[q + "k_proj.weight"] = lin(nkv * hd, d)
            w[q + "v_proj.weight"] = lin(nkv * hd, d)
            w[q + "o_proj.weight"] = lin(d, nh * hd)
            w[q + "q_norm.weight"] = 0.1 * torch.randn(hd)
            w[q + "k_norm.weight"] = 0.1 * torch.randn(hd)
        w[p + "post_attention_layernorm.weight"] = 0.1 * torch.randn(d)
        w[p + "mlp.gate_proj.weight"] = lin(f, d)
        w[p + "mlp.up_proj.weight"] = lin(f, d)
        w[p + "mlp.down_proj.weight"] = lin(d, f)
    w[lm + "norm.weight"] = 0.1 * torch.randn(d)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = lin(VOCAB, d)
    out = {k: (v if k.endswith("A_log") else v.to(torch.bfloat16)) for k, v in w.items()}
    # A few tensors of the vision tower (shapes as VISION makes them) and of the multi-token
    # prediction head, which the published checkpoints carry and a text run must skip.
    vd = VISION["hidden_size"]
    extra = {
        "model.visual.blocks.0.norm1.weight": torch.ones(vd),
        "model.visual.blocks.0.norm1.bias": torch.zeros(vd),
        "model.visual.blocks.0.attn.qkv.weight": lin(3 * vd, vd),
        "model.visual.merger.linear_fc2.weight": lin(d, 4 * vd),  # out_hidden_size = d
        "mtp.norm.weight": 0.1 * torch.randn(d),
    }
    # The rest of the multi-token prediction head (drawn after everything above, which stays
    # as it was before the head had more than its norm): its input projection and norms and
    # one full-attention layer.
    m = "mtp.layers.0."
    extra.update({
        "mtp.fc.weight": lin(d, 2 * d),
        "mtp.pre_fc_norm_embedding.weight": 0.1 * torch.randn(d),
        "mtp.pre_fc_norm_hidden.weight": 0.1 * torch.randn(d),
        m + "input_layernorm.weight": 0.1 * torch.randn(d),
        m + "self_attn.q_proj.weight": lin(2 * nh * hd, d),
        m + "self_attn.k_proj.weight": lin(nkv * hd, d),
        m + "self_attn.v_proj.weight": lin(nkv * hd, d),
        m + "self_attn.o_proj.weight": lin(d, nh * hd),
        m + "self_attn.q_norm.weight": 0.1 * torch.randn(hd),
        m + "self_attn.k_norm.weight": 0.1 * torch.randn(hd),
        m + "post_attention_layernorm.weight": 0.1 * torch.randn(d),
        m + "mlp.gate_proj.weight": lin(f, d),
        m + "mlp.up_proj.weight": lin(f, d),
        m + "mlp.down_proj.weight": lin(d, f),
    })
    out.update({k: v.to(torch.bfloat16) for k, v in extra.items()})
    return out


def config_json(cfg):
    text = {
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True,
        "dtype": "bfloat16", "eos_token_id": EOS,
        "full_attention_interval": cfg["full_attention_interval"], "head_dim": cfg["head_dim"],
        "hidden_act": "silu", "hidden_size": cfg["hidden_size"], "initializer_range": 0.02,
        "intermediate_size": cfg["intermediate_size"], "layer_types": layer_types(cfg),
        "linear_conv_kernel_dim": cfg["linear_conv_kernel_dim"],
        "linear_key_head_dim": cfg["linear_key_head_dim"],
        "linear_num_key_heads": cfg["linear_num_key_heads"],
        "linear_num_value_heads": cfg["linear_num_value_heads"],
        "linear_value_head_dim": cfg["linear_value_head_dim"], "mamba_ssm_dtype": "float32",
        "max_position_embeddings": cfg["max_position_embeddings"], "mlp_only_layers": [],
        "model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False, "num_attention_heads": cfg["num_attention_heads"],
        "num_hidden_layers": cfg["num_hidden_layers"],
        "num_key_value_heads": cfg["num_key_value_heads"], "rms_norm_eps": cfg["rms_norm_eps"],
        "rope_parameters": {
            "mrope_interleaved": True, "mrope_section": cfg["mrope_section"],
            "rope_type": "default", "rope_theta": cfg["rope_theta"],
            "partial_rotary_factor": cfg["partial_rotary_factor"]},
        "tie_word_embeddings": cfg["tie_word_embeddings"], "use_cache": True,
        "vocab_size": VOCAB,
    }
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"], "image_token_id": 151655,
        "model_type": "qwen3_5", "text_config": text,
        "tie_word_embeddings": cfg["tie_word_embeddings"],
        "transformers_version": "4.57.0.dev0", "video_token_id": 151656,
        "vision_config": dict(VISION, out_hidden_size=cfg["hidden_size"]),
        "vision_end_token_id": 151653, "vision_start_token_id": 151652,
    }


def main():
    torch.set_num_threads(2)
    for name, cfg in CHECKPOINTS.items():
        out = os.path.join(OUT, name)
        w = make_weights(cfg)
        result = tiny_lm.greedy(lambda ids: forward(cfg, w, ids), PROMPT, STEPS)
        tiny_lm.write_checkpoint(
            out, config_json(cfg),
            {"bos_token_id": 151643, "eos_token_id": [EOS, 151643], "do_sample": False}, w)
        probe = tiny_lm.probe_ids(result.first_logits, 8,
                                  [0, 1, 198, 9625, 151643, EOS, VOCAB - 1])
        tiny_lm.write_json(os.path.join(out, "reference.json"),
                           tiny_lm.reference_json(PROMPT, result, probe), indent=1)
        # A test with a logit tolerance well below the smallest top-2 margin cannot flip a
        # near-tie.
        print(name, "greedy:", result.ids, "smallest top-2 margin:", result.margin)
        # The head's guesses after the prompt and after 8 more tokens, each time with the
        # greedy token that follows as the next one.
        chains = []
        for more in (0, 8):
            ids = PROMPT + result.ids[:more]
            guesses, margin = mtp_guesses(cfg, w, ids, result.ids[more], MTP_STEPS)
            chains.append({"ids": ids, "next": result.ids[more], "guesses": guesses,
                           "smallest_margin": margin})
            print(name, "mtp after", len(ids), "+ 1:", guesses, "smallest top-2 margin:", margin)
        tiny_lm.write_json(os.path.join(out, "mtp_guesses.json"), {"chains": chains},
                           indent=1)


if __name__ == "__main__":
    main()
