#!/usr/bin/env python3
"""Writes the tiny Llama checkpoints of tests/data/llama/ as GGUF files, the way llama.cpp's
converter would: llama.cpp's tensor names, its Q/K row order for the rope (tools/gguf.py),
norms in F32, Llama 3.1's scaling as the rope_freqs tensor, the Llama 3.1 tokenizer (from the
committed archive tests/data/tokenizers/models/llama3_1.tar.xz) as the tokenizer section, and
its chat template. Into --out:

  tiny-f32.gguf               tests/data/llama/tiny-f32, F32 (untied, no rope scaling)
  tiny-bf16-tied.gguf         tests/data/llama/tiny-bf16-tied, matrices BF16 (tied, llama3 rope)
  tiny-bf16-tied-q8_0.gguf    the same, matrices Q8_0
  tiny-bf16-tied-q8_0-ref/    the Q8_0 file's weights dequantized to F32 as a Hugging Face
                              checkpoint (config.json, generation_config.json, model.safetensors)
  bad-*.gguf                  small broken files: unknown architecture, a missing tensor, a
                              tensor of the wrong shape, an unknown tokenizer model or
                              pre-tokenizer (each else a valid 1-block llama with 64 tokens)

The files are tens of MB (the vocabulary of 128256 rows), so nothing is committed: the build
runs this with plain python3 (no packages: tools/gguf.py writes the files and quantizes Q8_0) into
<build>/data/gguf/. `--check` compares tools/gguf.py's Q8_0 with the gguf package's
(gguf.quants.quantize and dequantize) on every tensor quantized here, bit for bit; it needs the
package (scripts/setup.sh --tools) and exits 77 without it.

  python3 tools/make_tiny_gguf.py --out DIR
  .venv/bin/python tools/make_tiny_gguf.py --check
"""
import argparse
import array
import json
import math
import os
import random
import struct
import sys
import tarfile


def _load_writer():
    """tools/gguf.py, loaded under another name than the gguf package's, which --check uses."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gguf.py")
    spec = importlib.util.spec_from_file_location("prism_gguf_writer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gguf = _load_writer()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA = os.path.join(ROOT, "tests", "data", "llama")
TOKENIZER = os.path.join(ROOT, "tests", "data", "tokenizers", "models", "llama3_1.tar.xz")


# ----------------------------------------------------------------------------------------------
# Reading the checkpoints.

def read_safetensors(path):
    """{name: (shape, float32 array)} of a safetensors file of F32 and BF16 tensors."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack_from("<Q", raw)
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        data = raw[8 + n + begin:8 + n + end]
        if t["dtype"] == "F32":
            values = array.array("f", data)
        elif t["dtype"] == "BF16":
            halves = array.array("H", data)
            values = array.array("f", array.array("I", (h << 16 for h in halves)).tobytes())
        else:
            sys.exit("make_tiny_gguf: %s: tensor %s is %s" % (path, name, t["dtype"]))
        out[name] = (tuple(t["shape"]), values)
    return out


def write_safetensors(path, tensors):
    """tensors: [(name, shape, float32 array)] as F32."""
    header, offset = {}, 0
    for name, shape, values in tensors:
        size = len(values) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, values in tensors:
            f.write(values.tobytes())


def tokenizer_files():
    """(tokenizer.json, tokenizer_config.json) of Llama 3.1, parsed, from the committed archive."""
    files = {}
    with tarfile.open(TOKENIZER) as tar:
        for member in tar.getmembers():
            name = os.path.basename(member.name)
            if member.isfile() and name in ("tokenizer.json", "tokenizer_config.json"):
                files[name] = json.loads(tar.extractfile(member).read().decode("utf-8"))
    return files["tokenizer.json"], files["tokenizer_config.json"]


# ----------------------------------------------------------------------------------------------
# The GGUF form.

def tokenizer_metadata(tok, tok_config):
    """The tokenizer section llama.cpp's converter writes for a Llama 3 tokenizer: every token
    by id, added special tokens typed CONTROL (other added tokens USER_DEFINED), the merges as
    "left right", the special ids, and the chat template."""
    vocab = tok["model"]["vocab"]
    added = {t["id"]: t for t in tok["added_tokens"]}
    size = max(max(vocab.values()), max(added)) + 1
    tokens, types = [None] * size, [gguf.TOKEN_NORMAL] * size
    for text, i in vocab.items():
        tokens[i] = text
    for i, t in added.items():
        tokens[i] = t["content"]
        types[i] = gguf.TOKEN_CONTROL if t["special"] else 4  # USER_DEFINED
    ids = {t: i for i, t in enumerate(tokens)}
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "llama-bpe",
        "tokenizer.ggml.tokens": gguf.Value(gguf.ARRAY, tokens, gguf.STRING),
        "tokenizer.ggml.token_type": gguf.Value(gguf.ARRAY, types, gguf.INT32),
        "tokenizer.ggml.merges": gguf.Value(gguf.ARRAY, merges, gguf.STRING),
        "tokenizer.ggml.bos_token_id": gguf.Value(gguf.UINT32, ids[tok_config["bos_token"]]),
        "tokenizer.ggml.eos_token_id": gguf.Value(gguf.UINT32, ids[tok_config["eos_token"]]),
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.chat_template": tok_config["chat_template"],
    }


def llama_metadata(cfg, name, file_type):
    meta = {
        "general.architecture": "llama",
        "general.name": name,
        "general.file_type": gguf.Value(gguf.UINT32, file_type),
        "llama.vocab_size": gguf.Value(gguf.UINT32, cfg["vocab_size"]),
        "llama.context_length": gguf.Value(gguf.UINT32, cfg["max_position_embeddings"]),
        "llama.embedding_length": gguf.Value(gguf.UINT32, cfg["hidden_size"]),
        "llama.block_count": gguf.Value(gguf.UINT32, cfg["num_hidden_layers"]),
        "llama.feed_forward_length": gguf.Value(gguf.UINT32, cfg["intermediate_size"]),
        "llama.attention.head_count": gguf.Value(gguf.UINT32, cfg["num_attention_heads"]),
        "llama.attention.head_count_kv": gguf.Value(gguf.UINT32, cfg["num_key_value_heads"]),
        "llama.rope.freq_base": float(cfg["rope_theta"]),
        "llama.attention.layer_norm_rms_epsilon": float(cfg["rms_norm_eps"]),
        "llama.rope.dimension_count": gguf.Value(gguf.UINT32, head_dim(cfg)),
    }
    if "head_dim" in cfg:  # the converter states it when the config does
        meta["llama.attention.key_length"] = gguf.Value(gguf.UINT32, cfg["head_dim"])
        meta["llama.attention.value_length"] = gguf.Value(gguf.UINT32, cfg["head_dim"])
    return meta


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def llama3_rope_factors(cfg):
    """rope_freqs: the factor each rotary frequency is divided by under Llama 3.1's scaling
    (1 for wavelengths below original / high_freq_factor, `factor` above original /
    low_freq_factor, a smooth blend between), as llama.cpp's converter computes them."""
    s, hd = cfg["rope_scaling"], head_dim(cfg)
    original = s["original_max_position_embeddings"]
    low_wavelen = original / s["low_freq_factor"]
    high_wavelen = original / s["high_freq_factor"]
    factors = []
    for i in range(0, hd, 2):
        wavelen = 2 * math.pi * cfg["rope_theta"] ** (i / hd)
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(s["factor"])
        else:
            smooth = (original / wavelen - s["low_freq_factor"]) / (
                s["high_freq_factor"] - s["low_freq_factor"])
            factors.append(1 / ((1 - smooth) / s["factor"] + smooth))
    return array.array("f", factors)


def reorder_rows(shape, values, order):
    cols = len(values) // shape[0]
    out = array.array("f")
    for r in order:
        out.extend(values[r * cols:(r + 1) * cols])
    return out


def gguf_rows(cfg, name, shape, values):
    """A Hugging Face tensor's values in llama.cpp's row order (q and k reordered)."""
    if name.endswith("self_attn.q_proj.weight"):
        return reorder_rows(shape, values,
                            gguf.llama_rope_row_order(shape[0], cfg["num_attention_heads"]))
    if name.endswith("self_attn.k_proj.weight"):
        return reorder_rows(shape, values,
                            gguf.llama_rope_row_order(shape[0], cfg["num_key_value_heads"]))
    return values


def bf16_bits(values):
    """float32 values that are exactly bfloat16 (a bf16 checkpoint's) as their 16 bits."""
    return array.array("H", (u >> 16 for u in array.array("I", values.tobytes())))


def convert(src, cfg, tensors, matrix_type, tokenizer_kv, out_path, name):
    """Writes one GGUF file; returns {hf name: Q8_0 bytes} of the tensors it quantized."""
    quantized = {}
    written = []
    for hf, (shape, values) in tensors.items():
        values = gguf_rows(cfg, hf, shape, values)
        if len(shape) == 1 or matrix_type == gguf.GGML_F32:
            written.append(gguf.Tensor(gguf.llama_tensor_name(hf), shape, gguf.GGML_F32, values))
        elif matrix_type == gguf.GGML_BF16:
            written.append(gguf.Tensor(gguf.llama_tensor_name(hf), shape, gguf.GGML_BF16,
                                       bf16_bits(values)))
        else:
            blocks = gguf.quantize_q8_0(values)
            quantized[hf] = blocks
            written.append(gguf.Tensor(gguf.llama_tensor_name(hf), shape, gguf.GGML_Q8_0, blocks))
    if cfg.get("rope_scaling"):
        factors = llama3_rope_factors(cfg)
        written.append(gguf.Tensor("rope_freqs.weight", (len(factors),), gguf.GGML_F32, factors))
    # llama.cpp's file types: 0 all F32, 32 mostly BF16, 7 mostly Q8_0.
    file_type = {gguf.GGML_F32: 0, gguf.GGML_BF16: 32, gguf.GGML_Q8_0: 7}[matrix_type]
    metadata = llama_metadata(cfg, name, file_type)
    metadata.update(tokenizer_kv)
    gguf.write(out_path, metadata, written)
    return quantized


# ----------------------------------------------------------------------------------------------
# Broken files: a valid small llama, then one thing wrong.

def small_llama(seed=0):
    rng = random.Random(seed)
    cfg = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
               num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
               rope_theta=10000.0, rms_norm_eps=1e-5)
    d, f, hd = 32, 64, 16

    def t(name, *shape):
        n = 1
        for s in shape:
            n *= s
        return gguf.Tensor(name, shape, gguf.GGML_F32,
                           array.array("f", (rng.gauss(0, 0.1) for _ in range(n))))
    tensors = [t("token_embd.weight", 64, d), t("output_norm.weight", d),
               t("blk.0.attn_norm.weight", d), t("blk.0.attn_q.weight", 2 * hd, d),
               t("blk.0.attn_k.weight", hd, d), t("blk.0.attn_v.weight", hd, d),
               t("blk.0.attn_output.weight", d, 2 * hd), t("blk.0.ffn_norm.weight", d),
               t("blk.0.ffn_gate.weight", f, d), t("blk.0.ffn_up.weight", f, d),
               t("blk.0.ffn_down.weight", d, f)]
    metadata = llama_metadata(cfg, "small llama", 0)
    metadata.update({
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "llama-bpe",
        "tokenizer.ggml.tokens": gguf.Value(gguf.ARRAY, ["t%d" % i for i in range(64)],
                                            gguf.STRING),
        "tokenizer.ggml.merges": gguf.Value(gguf.ARRAY, [], gguf.STRING),
        "tokenizer.ggml.eos_token_id": gguf.Value(gguf.UINT32, 63),
    })
    return metadata, tensors


def write_bad_files(out):
    def variant(file, edit):
        metadata, tensors = small_llama()
        tensors = edit(metadata, tensors) or tensors
        gguf.write(os.path.join(out, file), metadata, tensors)

    variant("bad-arch.gguf", lambda m, t: m.update({"general.architecture": "mamba"}))
    variant("bad-missing.gguf", lambda m, t: [x for x in t if x.name != "blk.0.ffn_up.weight"])

    def wrong_shape(m, tensors):
        out = []
        for x in tensors:
            if x.name == "blk.0.attn_k.weight":  # 2 key/value heads' rows where 1 is declared
                x = gguf.Tensor(x.name, (32, 32), gguf.GGML_F32, array.array("f", [0.0] * 1024))
            out.append(x)
        return out
    variant("bad-shape.gguf", wrong_shape)
    variant("bad-tokenizer.gguf", lambda m, t: m.update({"tokenizer.ggml.model": "bert"}))
    variant("bad-pre.gguf", lambda m, t: m.update({"tokenizer.ggml.pre": "mystery-bpe"}))
    variant("small.gguf", lambda m, t: None)  # the valid one, for comparison


# ----------------------------------------------------------------------------------------------

def checkpoint(name):
    directory = os.path.join(LLAMA, name)
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    return directory, cfg, read_safetensors(os.path.join(directory, "model.safetensors"))


def write_all(out):
    os.makedirs(out, exist_ok=True)
    tok, tok_config = tokenizer_files()
    tokenizer_kv = tokenizer_metadata(tok, tok_config)

    _, cfg, tensors = checkpoint("tiny-f32")
    convert("tiny-f32", cfg, tensors, gguf.GGML_F32, tokenizer_kv,
            os.path.join(out, "tiny-f32.gguf"), "tiny Llama (f32)")

    directory, cfg, tensors = checkpoint("tiny-bf16-tied")
    convert("tiny-bf16-tied", cfg, tensors, gguf.GGML_BF16, tokenizer_kv,
            os.path.join(out, "tiny-bf16-tied.gguf"), "tiny Llama (bf16, tied)")
    quantized = convert("tiny-bf16-tied", cfg, tensors, gguf.GGML_Q8_0, tokenizer_kv,
                        os.path.join(out, "tiny-bf16-tied-q8_0.gguf"), "tiny Llama (Q8_0, tied)")

    # The same model with the Q8_0 file's values, in the Hugging Face layout (rows in Hugging
    # Face's order: the quantization is per row, so reordering rows commutes with it).
    ref = os.path.join(out, "tiny-bf16-tied-q8_0-ref")
    os.makedirs(ref, exist_ok=True)
    written = []
    for hf, (shape, values) in tensors.items():
        if hf in quantized:
            values = gguf.dequantize_q8_0(quantized[hf])
            order = None
            if hf.endswith("q_proj.weight"):
                order = gguf.llama_rope_row_order(shape[0], cfg["num_attention_heads"])
            elif hf.endswith("k_proj.weight"):
                order = gguf.llama_rope_row_order(shape[0], cfg["num_key_value_heads"])
            if order:  # back from llama.cpp's order: GGUF row g holds Hugging Face row order[g]
                inverse = [0] * len(order)
                for g, r in enumerate(order):
                    inverse[r] = g
                values = reorder_rows(shape, values, inverse)
        written.append((hf, shape, values))
    write_safetensors(os.path.join(ref, "model.safetensors"), written)
    with open(os.path.join(ref, "config.json"), "w") as f:
        json.dump(dict(cfg, torch_dtype="float32"), f, indent=1)
    with open(os.path.join(directory, "generation_config.json")) as src, \
            open(os.path.join(ref, "generation_config.json"), "w") as dst:
        dst.write(src.read())

    write_bad_files(out)
    return quantized, tensors, cfg


def check():
    """tools/gguf.py's Q8_0 against the gguf package's, bit for bit, on the tensors quantized
    here (each in llama.cpp's row order, as written)."""
    # Python puts this script's directory first on the path, where tools/gguf.py would shadow
    # the package.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import numpy as np
        from gguf import quants as package_quants  # the PyPI package
    except ImportError:
        print("make_tiny_gguf --check: the gguf package is not installed (scripts/setup.sh --tools)")
        return 77
    _, cfg, tensors = checkpoint("tiny-bf16-tied")
    compared = 0
    for hf, (shape, values) in tensors.items():
        if len(shape) == 1:
            continue
        values = gguf_rows(cfg, hf, shape, values)
        ours = gguf.quantize_q8_0(values)
        data = np.frombuffer(values.tobytes(), dtype=np.float32).reshape(shape)
        theirs = package_quants.quantize(data, package_quants.GGMLQuantizationType.Q8_0)
        if ours != theirs.tobytes():
            print("make_tiny_gguf --check: Q8_0 of %s differs from the gguf package's" % hf)
            return 1
        back = package_quants.dequantize(theirs, package_quants.GGMLQuantizationType.Q8_0)
        if gguf.dequantize_q8_0(ours).tobytes() != back.astype(np.float32).tobytes():
            print("make_tiny_gguf --check: dequantized %s differs from the gguf package's" % hf)
            return 1
        compared += 1
    print("make_tiny_gguf --check: Q8_0 of %d tensors equals the gguf package's" % compared)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="directory to write")
    ap.add_argument("--check", action="store_true",
                    help="compare tools/gguf.py's Q8_0 with the gguf package's")
    args = ap.parse_args()
    if args.check:
        sys.exit(check())
    if not args.out:
        ap.error("--out DIR or --check")
    write_all(args.out)


if __name__ == "__main__":
    main()
