#!/usr/bin/env python3
"""Writes a random-weight Llama checkpoint twice, as the same model: in the Hugging Face layout
(config.json, generation_config.json, model.safetensors in bf16, the Llama 3 tokenizer files)
for prism, and as model.gguf (BF16) for llama.cpp, with llama.cpp's tensor names, its Q/K row
order (tools/gguf.py) and the tokenizer section it requires. Llama 3.2 1B's shape by default
(about 2.5 GB each); `prism-bench llm` (bench/llm_bench.cpp) makes it on first use, nothing is
committed.

  scripts/setup.sh --bench && .venv/bin/python tools/make_bench_llama.py --out DIR [--layers N]
      [--seed S]

Needs numpy (scripts/requirements/bench.txt; tools.txt has it too). The tokenizer files are read
from the committed archive tests/data/tokenizers/models/llama3.tar.xz.
The rope has no llama3 scaling: GGUF would carry it as an extra rope_freqs tensor, and
leaving it out keeps both files the same model with nothing more to convert.
"""
import argparse
import json
import os
import struct
import sys
import tarfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(ROOT, "tests/data/tokenizers/models/llama3.tar.xz")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

SHAPE = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
             num_attention_heads=32, num_key_value_heads=8, head_dim=64)
BOS, EOS = 128000, 128001


def bf16(x):
    """float32 -> bfloat16 bits (uint16), rounding to nearest even."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def hf_tensors(cfg, rng):
    """(Hugging Face name, bf16 bits) for every weight, in a fixed order."""
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd

    def normal(rows, cols, std):
        return bf16(rng.standard_normal((rows, cols), dtype=np.float32) * std)

    def norm():
        return bf16(1 + 0.1 * rng.standard_normal(d, dtype=np.float32))

    yield "model.embed_tokens.weight", normal(v, d, 0.02)
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        yield p + "input_layernorm.weight", norm()
        # q and k a little larger than the rest: attention far from uniform, so a wrong rope
        # row order shows, yet smooth enough that rounding seldom flips a greedy token.
        yield p + "self_attn.q_proj.weight", normal(q, d, 0.025)
        yield p + "self_attn.k_proj.weight", normal(kv, d, 0.025)
        yield p + "self_attn.v_proj.weight", normal(kv, d, 0.02)
        yield p + "self_attn.o_proj.weight", normal(d, q, 0.02)
        yield p + "post_attention_layernorm.weight", norm()
        yield p + "mlp.gate_proj.weight", normal(f, d, 0.02)
        yield p + "mlp.up_proj.weight", normal(f, d, 0.02)
        yield p + "mlp.down_proj.weight", normal(d, f, 0.02)
    yield "model.norm.weight", norm()


def gguf_tensor(cfg, name, bits):
    """The GGUF form of one Hugging Face tensor: renamed, q/k rows reordered for llama.cpp's
    rope, norms as F32 (as llama.cpp's converter stores them; bf16 values are exact in f32)."""
    if name.endswith("self_attn.q_proj.weight"):
        bits = bits[gguf.llama_rope_row_order(bits.shape[0], cfg["num_attention_heads"])]
    elif name.endswith("self_attn.k_proj.weight"):
        bits = bits[gguf.llama_rope_row_order(bits.shape[0], cfg["num_key_value_heads"])]
    if bits.ndim == 1:
        f32 = (bits.astype(np.uint32) << 16).view(np.float32)
        return gguf.Tensor(gguf.llama_tensor_name(name), bits.shape, gguf.GGML_F32,
                           np.ascontiguousarray(f32))
    return gguf.Tensor(gguf.llama_tensor_name(name), bits.shape, gguf.GGML_BF16,
                       np.ascontiguousarray(bits))


def tokenizer_files():
    """{name: bytes} of the Llama 3 tokenizer files, from the archive's one directory."""
    files = {}
    with tarfile.open(TOKENIZER) as tar:
        for member in tar.getmembers():
            name = os.path.basename(member.name)
            if member.isfile() and name in TOKENIZER_FILES:
                files[name] = tar.extractfile(member).read()
    missing = [n for n in TOKENIZER_FILES if n not in files]
    if missing:
        sys.exit("make_bench_llama: %s lacks %s" % (TOKENIZER, ", ".join(missing)))
    return files


def tokenizer_metadata(tokenizer_json):
    """The tokenizer section llama.cpp requires, from the Llama 3 tokenizer.json."""
    tok = json.loads(tokenizer_json.decode("utf-8"))
    vocab = tok["model"]["vocab"]
    added = {t["id"]: t for t in tok["added_tokens"]}
    size = max(max(vocab.values()), max(added)) + 1
    tokens, types = [None] * size, [gguf.TOKEN_NORMAL] * size
    for text, i in vocab.items():
        tokens[i] = text
    for i, t in added.items():
        tokens[i] = t["content"]
        types[i] = gguf.TOKEN_CONTROL if t["special"] else gguf.TOKEN_NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    return size, {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "llama-bpe",
        "tokenizer.ggml.tokens": gguf.Value(gguf.ARRAY, tokens, gguf.STRING),
        "tokenizer.ggml.token_type": gguf.Value(gguf.ARRAY, types, gguf.INT32),
        "tokenizer.ggml.merges": gguf.Value(gguf.ARRAY, merges, gguf.STRING),
        "tokenizer.ggml.bos_token_id": gguf.Value(gguf.UINT32, BOS),
        "tokenizer.ggml.eos_token_id": gguf.Value(gguf.UINT32, EOS),
        "tokenizer.ggml.add_bos_token": False,
    }


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, bits in tensors:
        header[name] = {"dtype": "BF16", "shape": list(bits.shape),
                        "data_offsets": [offset, offset + bits.nbytes]}
        offset += bits.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, bits in tensors:
            f.write(bits.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory to write")
    ap.add_argument("--layers", type=int, default=SHAPE["num_hidden_layers"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.layers < 1:
        sys.exit("make_bench_llama: --layers must be at least 1")
    if not os.path.isfile(TOKENIZER):
        sys.exit("make_bench_llama: no Llama 3 tokenizer archive %s" % TOKENIZER)
    cfg = dict(SHAPE, num_hidden_layers=args.layers)
    tokenizer = tokenizer_files()
    vocab_size, tokenizer_kv = tokenizer_metadata(tokenizer["tokenizer.json"])
    if vocab_size != cfg["vocab_size"]:
        sys.exit("make_bench_llama: the tokenizer has %d tokens, not %d" %
                 (vocab_size, cfg["vocab_size"]))
    os.makedirs(args.out, exist_ok=True)

    tensors = list(hf_tensors(cfg, np.random.default_rng(args.seed)))
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensors)
    hd = cfg["head_dim"]
    metadata = {
        "general.architecture": "llama",
        "general.name": "random Llama (%d layers)" % cfg["num_hidden_layers"],
        "general.file_type": gguf.Value(gguf.UINT32, 32),  # all matrices BF16
        "llama.vocab_size": gguf.Value(gguf.UINT32, cfg["vocab_size"]),
        "llama.context_length": gguf.Value(gguf.UINT32, 131072),
        "llama.embedding_length": gguf.Value(gguf.UINT32, cfg["hidden_size"]),
        "llama.block_count": gguf.Value(gguf.UINT32, cfg["num_hidden_layers"]),
        "llama.feed_forward_length": gguf.Value(gguf.UINT32, cfg["intermediate_size"]),
        "llama.attention.head_count": gguf.Value(gguf.UINT32, cfg["num_attention_heads"]),
        "llama.attention.head_count_kv": gguf.Value(gguf.UINT32, cfg["num_key_value_heads"]),
        "llama.attention.key_length": gguf.Value(gguf.UINT32, hd),
        "llama.attention.value_length": gguf.Value(gguf.UINT32, hd),
        "llama.rope.dimension_count": gguf.Value(gguf.UINT32, hd),
        "llama.rope.freq_base": 500000.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
    }
    metadata.update(tokenizer_kv)
    # Tied embeddings: no output.weight, llama.cpp then reads token_embd.weight for the logits.
    gguf.write(os.path.join(args.out, "model.gguf"), metadata,
               [gguf_tensor(cfg, name, bits) for name, bits in tensors])

    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": cfg["vocab_size"], "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "num_hidden_layers": cfg["num_hidden_layers"],
        "num_attention_heads": cfg["num_attention_heads"],
        "num_key_value_heads": cfg["num_key_value_heads"], "head_dim": hd,
        "max_position_embeddings": 131072, "rope_theta": 500000.0, "rope_scaling": None,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "hidden_act": "silu",
        "torch_dtype": "bfloat16", "bos_token_id": BOS, "eos_token_id": EOS}
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": BOS, "eos_token_id": EOS}, f)
    for name, data in tokenizer.items():
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
