#!/usr/bin/env python3
"""Writes the tiny checkpoints of tests/data/{llama,lfm2,qwen3_5}/ as GGUF files, the way
llama.cpp's converter (convert_hf_to_gguf.py) would: its tensor names, metadata and tensor types
(norms, vectors and convolution kernels F32, the other matrices in the file's type), and what it
does to the tensors on the way: Llama's Q/K row order for the rope (tools/gguf.py) and Llama
3.1's scaling as the rope_freqs tensor; LFM 2's convolution kernels squeezed to [d, taps];
Qwen 3.5's norm weights as 1 + w (but the gated norm's), A_log as -exp(A_log), dt_bias as
ssm_dt.bias, the convolution squeezed, the value heads regrouped into ggml's broadcast order
(qwen35_value_heads) and its multi-token prediction layer's tensors after the model's blocks.
The tokenizer section is the model's tokenizer as the converter writes it (tokenizer_metadata):
Llama 3.1's and Qwen 3's from the committed archives under tests/data/tokenizers/models/, the
LFM 2-like one of tests/data/lfm2/tokenizer/. Into --out:

  tiny-f32.gguf               tests/data/llama/tiny-f32, F32 (untied, no rope scaling)
  tiny-bf16-tied.gguf         tests/data/llama/tiny-bf16-tied, matrices BF16 (tied, llama3 rope)
  tiny-bf16-tied-q8_0.gguf    the same, matrices Q8_0
  tiny-bf16-tied-q8_0-ref/    the Q8_0 file's weights dequantized to F32 as a Hugging Face
                              checkpoint (config.json, generation_config.json, model.safetensors)
  lfm2-tiny-bf16-tied.gguf    tests/data/lfm2/tiny-bf16-tied, matrices BF16 ("lfm2")
  qwen3_5-tiny-bf16-tied.gguf tests/data/qwen3_5/tiny-bf16-tied, matrices BF16 ("qwen35"), with
                              the Qwen 3 tokenizer its vocabulary fits ("qwen2")
  bad-*.gguf                  small broken files: unknown architecture, a missing tensor, a
                              tensor of the wrong shape, an unknown tokenizer model or
                              pre-tokenizer (each else a valid 1-block llama with 64 tokens);
                              the tiny LFM 2 and Qwen 3.5 with their vocabulary cut to 64 rows
                              and no tokenizer, missing a tensor, metadata or of a wrong shape
  qwen35-small-q8_0.gguf      the tiny Qwen 3.5 cut so, its matrices of whole Q8_0 rows in Q8_0
                              (ssm_out, whose columns are in llama.cpp's order, among them)
  qwen35-small-q8_0-ref.gguf  the same, those matrices dequantized to F32
  llamacpp-small-{f32,q8_0,q4_0}.gguf
                              a random 2-block Llama with heads of 32 (which llama.cpp runs:
                              it fails on the tiny checkpoints' heads of 8) and a vocabulary of
                              256 made-up tokens, F32 and with every matrix in Q8_0 or Q4_0, for
                              tests/data/gguf/llamacpp_reference.json

The files are tens of MB (the vocabulary of 128256 rows), so nothing is committed: the build
runs this with plain python3 (no packages: tools/gguf.py writes the files and quantizes Q8_0 and
Q4_0) into <build>/data/gguf/. `--check` compares tools/gguf.py's Q8_0 and Q4_0 with the gguf
package's (gguf.quants.quantize and dequantize) on every tensor quantized here, bit for bit; it
needs the package (scripts/setup.sh --tools) and exits 77 without it.

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
DATA = os.path.join(ROOT, "tests", "data")
LLAMA = os.path.join(DATA, "llama")
TOKENIZERS = os.path.join(DATA, "tokenizers", "models")


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


def tokenizer_files(name):
    """(tokenizer.json, tokenizer_config.json), parsed, from the committed archive `name`
    (llama3_1, qwen3) under tests/data/tokenizers/models/, or from a directory."""
    files = {}
    if os.path.isdir(name):
        for file in ("tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(name, file), encoding="utf-8") as f:
                files[file] = json.load(f)
    else:
        with tarfile.open(os.path.join(TOKENIZERS, name + ".tar.xz")) as tar:
            for member in tar.getmembers():
                base = os.path.basename(member.name)
                if member.isfile() and base in ("tokenizer.json", "tokenizer_config.json"):
                    files[base] = json.loads(tar.extractfile(member).read().decode("utf-8"))
    return files["tokenizer.json"], files["tokenizer_config.json"]


# ----------------------------------------------------------------------------------------------
# The GGUF form.

def looks_special(token):
    """The converter's test for added tokens that ought to be control tokens though not marked
    special (does_token_look_special): <|...|>, <unused...> and a few names."""
    return (token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (token.startswith("<|") and token.endswith("|>"))
            or (token.startswith("<\uff5c") and token.endswith("\uff5c>"))
            or (token.startswith("<unused") and token.endswith(">")))


def special_vocab(tok, tok_config, cfg, vocab_size):
    """The special ids and add_*_token flags the converter's gguf.SpecialVocab finds, in its
    order: each type's token named in tokenizer_config.json (looked up among the added tokens),
    else config.json's <type>_token_id (or text_config's); whether bos / eos are added, from the
    post-processor (a ByteLevel one adds neither; a TemplateProcessing adds the special token it
    starts or ends with), else tokenizer_config.json's add_<type>_token."""
    types = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
    ids, add = {}, {}
    post = tok.get("post_processor") or {}
    for processor in post.get("processors", [post]) if post else []:
        if processor.get("type") == "ByteLevel":
            add.setdefault("bos", False)
            add.setdefault("eos", False)
        elif processor.get("type") == "TemplateProcessing":
            single = processor.get("single", [])
            if len(single) > 1:
                first = single[0].get("SpecialToken", {}).get("id")
                last = single[-1].get("SpecialToken", {}).get("id")
                if first:
                    add["bos"] = first == tok_config.get("bos_token")
                if last:
                    add["eos"] = last == tok_config.get("eos_token")
    for t in types:
        if isinstance(tok_config.get("add_%s_token" % t), bool) and t not in add:
            add[t] = tok_config["add_%s_token" % t]
        entry = tok_config.get("%s_token" % t)
        content = entry.get("content") if isinstance(entry, dict) else entry
        if isinstance(content, str):
            found = [a["id"] for a in tok["added_tokens"] if a["content"] == content]
            if found and found[0] < vocab_size:
                ids[t] = found[0]
    text = cfg.get("text_config", {})
    for t in types:
        value = cfg.get("%s_token_id" % t, text.get("%s_token_id" % t))
        if isinstance(value, int) and 0 <= value < vocab_size and t not in ids:
            ids[t] = value
    return ids, add


def tokenizer_metadata(tok, tok_config, cfg, pre):
    """The tokenizer section llama.cpp's converter writes for a byte-level BPE tokenizer: every
    token by id up to the model's vocabulary (ids the tokenizer leaves out as unused "[PADn]"),
    added tokens that are special or look it typed CONTROL, other added tokens USER_DEFINED, the
    merges as "left right", `pre` (the name the converter gives the pre-tokenizer, from a hash
    of its output), the special ids and flags (special_vocab) and the chat template."""
    text = cfg.get("text_config", cfg)
    vocab = tok["model"]["vocab"]
    added = {t["id"]: t for t in tok["added_tokens"]}
    size = text.get("vocab_size") or max(max(vocab.values()), max(added)) + 1
    tokens = ["[PAD%d]" % i for i in range(size)]
    types = [5] * size  # UNUSED
    for content, i in vocab.items():
        tokens[i], types[i] = content, gguf.TOKEN_NORMAL
    for i, t in added.items():
        tokens[i] = t["content"]
        special = t["special"] or looks_special(t["content"])
        types[i] = gguf.TOKEN_CONTROL if special else 4  # USER_DEFINED
    # Pairs as "left right", a space within either written as U+0120, as the converter does.
    merges = [m if isinstance(m, str) else
              " ".join(part.replace(" ", "\u0120") for part in m) for m in tok["model"]["merges"]]
    meta = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": gguf.Value(gguf.ARRAY, tokens, gguf.STRING),
        "tokenizer.ggml.token_type": gguf.Value(gguf.ARRAY, types, gguf.INT32),
        "tokenizer.ggml.merges": gguf.Value(gguf.ARRAY, merges, gguf.STRING),
    }
    ids, add = special_vocab(tok, tok_config, cfg, size)
    names = {"unk": "unknown", "sep": "seperator", "pad": "padding"}  # llama.cpp's spelling
    for t, i in ids.items():
        if t != "cls":  # which the converter has no key for
            meta["tokenizer.ggml.%s_token_id" % names.get(t, t)] = gguf.Value(gguf.UINT32, i)
    for t, flag in add.items():
        meta["tokenizer.ggml.add_%s_token" % t] = flag
    if tok_config.get("chat_template"):
        meta["tokenizer.chat_template"] = tok_config["chat_template"]
    return meta


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
# LFM 2 and Qwen 3.5.

def size_label(tensors):
    """general.size_label as the converter writes it: the parameters counted, e.g. "2.2M"."""
    count = sum(math.prod(t.shape) for t in tensors)
    for limit, scale, suffix in ((1e12, 1e-12, "T"), (1e9, 1e-9, "B"), (1e6, 1e-6, "M")):
        if count > limit:
            break
    else:
        scale, suffix = 1e-3, "K"
    scaled = count * scale
    return "%.*f%s" % (max(2 - len(str(round(scaled)).lstrip("0")), 0), scaled, suffix)


def converter_type(gguf_name, shape, matrix_type):
    """The type the converter gives a tensor: F32 for vectors, norms, convolution kernels and
    anything not a ".weight"; the file's type for the other matrices."""
    if (len(shape) <= 1 or gguf_name.endswith("_norm.weight") or not gguf_name.endswith(".weight")
            or gguf_name.endswith((".shortconv.conv.weight", ".ssm_conv1d.weight"))):
        return gguf.GGML_F32
    return matrix_type


def gguf_tensor(gguf_name, shape, values, matrix_type):
    ggml_type = converter_type(gguf_name, shape, matrix_type)
    data = bf16_bits(values) if ggml_type == gguf.GGML_BF16 else values
    return gguf.Tensor(gguf_name, shape, ggml_type, data)


def general_metadata(arch, name, tensors):
    return {"general.architecture": arch, "general.type": "model", "general.name": name,
            "general.size_label": size_label(tensors)}


def u32(value):
    return gguf.Value(gguf.UINT32, value)


def lfm2_ffn_width(cfg):
    """The MLP's width as Lfm2MLP (and the converter) adjust block_ff_dim."""
    width = cfg.get("block_ff_dim", cfg.get("intermediate_size"))
    if cfg["block_auto_adjust_ff_dim"]:
        width = int(2 * width / 3)
        if cfg["block_ffn_dim_multiplier"] is not None:
            width = int(cfg["block_ffn_dim_multiplier"] * width)
        multiple = cfg["block_multiple_of"]
        width = multiple * ((width + multiple - 1) // multiple)
    return width


LFM2_NAMES = {
    "operator_norm.weight": "attn_norm.weight",
    "ffn_norm.weight": "ffn_norm.weight",
    "feed_forward.w1.weight": "ffn_gate.weight",
    "feed_forward.w3.weight": "ffn_up.weight",
    "feed_forward.w2.weight": "ffn_down.weight",
    "conv.conv.weight": "shortconv.conv.weight",
    "conv.in_proj.weight": "shortconv.in_proj.weight",
    "conv.out_proj.weight": "shortconv.out_proj.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.out_proj.weight": "attn_output.weight",
    "self_attn.q_layernorm.weight": "attn_q_norm.weight",
    "self_attn.k_layernorm.weight": "attn_k_norm.weight",
}


def lfm2_tensors(tensors, matrix_type):
    """An LFM 2 checkpoint's tensors as the converter writes them: renamed, the convolution's
    kernels [d, 1, taps] squeezed to [d, taps]; no values change."""
    fixed = {"model.embed_tokens.weight": "token_embd.weight",
             "model.embedding_norm.weight": "token_embd_norm.weight",
             "lm_head.weight": "output.weight"}
    out = []
    for hf, (shape, values) in tensors.items():
        if hf in fixed:
            name = fixed[hf]
        else:
            layer, rest = hf[len("model.layers."):].split(".", 1)
            name = "blk.%s.%s" % (layer, LFM2_NAMES[rest])
        if hf.endswith(".conv.conv.weight"):
            shape = (shape[0], shape[2])
        out.append(gguf_tensor(name, shape, values, matrix_type))
    return out


def lfm2_gguf(cfg, tensors, matrix_type, file_type, name):
    """(metadata, tensors) of an LFM 2 checkpoint as the converter writes them; head_count_kv
    lists each layer's key/value heads, 0 for a convolution layer."""
    written = lfm2_tensors(tensors, matrix_type)
    meta = general_metadata("lfm2", name, written)
    kv = [cfg["num_key_value_heads"] if t != "conv" else 0 for t in cfg["layer_types"]]
    meta.update({
        "lfm2.block_count": u32(cfg["num_hidden_layers"]),
        "lfm2.context_length": u32(cfg["max_position_embeddings"]),
        "lfm2.embedding_length": u32(cfg["hidden_size"]),
        "lfm2.feed_forward_length": u32(lfm2_ffn_width(cfg)),
        "lfm2.attention.head_count": u32(cfg["num_attention_heads"]),
        "lfm2.attention.head_count_kv": gguf.Value(gguf.ARRAY, kv, gguf.INT32),
        "lfm2.rope.freq_base": float(cfg["rope_theta"]),
        "lfm2.attention.layer_norm_rms_epsilon": float(cfg["norm_eps"]),
        "general.file_type": u32(file_type),
        "lfm2.vocab_size": u32(cfg["vocab_size"]),
        "lfm2.shortconv.l_cache": u32(cfg["conv_L_cache"]),
        "general.quantization_version": u32(2),
    })
    return meta, written


def qwen35_value_heads(key_heads, value_heads, unit):
    """llama.cpp's order of Qwen 3.5's value heads (its converter's _reorder_v_heads), each
    `unit` rows or elements: Hugging Face keeps the value heads of each key head together (head
    g * per_key + j of key head g), ggml broadcasts key heads over value heads tiled (j *
    key_heads + g). Returns the Hugging Face position of each stored one."""
    per_key = value_heads // key_heads
    order = [0] * (value_heads * unit)
    for g in range(key_heads):
        for j in range(per_key):
            for e in range(unit):
                order[(j * key_heads + g) * unit + e] = (g * per_key + j) * unit + e
    return order


def take(values, order, unit=1):
    """values' runs of `unit` elements in `order` (of run indices)."""
    out = array.array("f")
    for i in order:
        out.extend(values[i * unit:(i + 1) * unit])
    return out


def take_columns(shape, values, order):
    rows, cols = shape
    out = array.array("f")
    for r in range(rows):
        row = values[r * cols:(r + 1) * cols]
        out.extend(row[c] for c in order)
    return out


QWEN35_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
    "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight",
    "linear_attn.A_log": "ssm_a",
    "linear_attn.dt_bias": "ssm_dt.bias",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight",
    "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
    "shared_head.norm.weight": "nextn.shared_head_norm.weight",
    "eh_proj.weight": "nextn.eh_proj.weight",
    "enorm.weight": "nextn.enorm.weight",
    "hnorm.weight": "nextn.hnorm.weight",
}
# The multi-token prediction head's tensors outside its layer, as the converter renames them
# (into the block after the model's layers).
QWEN35_MTP_NAMES = {
    "mtp.norm.weight": "shared_head.norm.weight",
    "mtp.fc.weight": "eh_proj.weight",
    "mtp.pre_fc_norm_embedding.weight": "enorm.weight",
    "mtp.pre_fc_norm_hidden.weight": "hnorm.weight",
}


def qwen35_tensors(cfg, tensors, matrix_type):
    """A Qwen 3.5 checkpoint's language model as the converter writes it: renamed (the
    multi-token prediction layer's `mtp.*` after the model's layers, the vision tower left
    out), the norm weights w as w + 1 (but the gated norm's, linear_attn.norm), A_log as
    -exp(A_log), the convolution's kernels squeezed to [channels, taps], and the value heads of
    in_proj_qkv's v rows, in_proj_z's, in_proj_a's and in_proj_b's rows, out_proj's columns,
    A_log, dt_bias and the convolution's v channels in llama.cpp's order."""
    text = cfg["text_config"]
    layers = text["num_hidden_layers"]
    nk, nv = text["linear_num_key_heads"], text["linear_num_value_heads"]
    dk, dv = text["linear_key_head_dim"], text["linear_value_head_dim"]
    keys = nk * dk
    out = []
    for hf, (shape, values) in tensors.items():
        if hf.startswith("model.visual."):
            continue
        if hf in QWEN35_MTP_NAMES:
            hf = "model.language_model.layers.%d.%s" % (layers, QWEN35_MTP_NAMES[hf])
        elif hf.startswith("mtp.layers."):
            index, rest = hf[len("mtp.layers."):].split(".", 1)
            hf = "model.language_model.layers.%d.%s" % (layers + int(index), rest)
        if not hf.startswith("model.language_model."):
            sys.exit("make_tiny_gguf: Qwen 3.5 tensor %s is not converted here" % hf)
        hf = "model." + hf[len("model.language_model."):]
        if hf == "model.embed_tokens.weight":
            name = "token_embd.weight"
        elif hf == "model.norm.weight":
            name = "output_norm.weight"
        elif hf == "lm_head.weight":
            name = "output.weight"
        else:
            layer, rest = hf[len("model.layers."):].split(".", 1)
            name = "blk.%s.%s" % (layer, QWEN35_NAMES[rest])
        if hf.endswith("A_log"):
            values = array.array("f", (-math.exp(x) for x in values))
        elif hf.endswith("norm.weight") and not hf.endswith("linear_attn.norm.weight"):
            values = array.array("f", (x + 1 for x in values))
        if "conv1d" in hf:
            shape = (shape[0], shape[2])
        if nk != nv and ".linear_attn." in hf:
            if "in_proj_qkv" in hf or "conv1d" in hf:  # rows: q and k in place, v regrouped
                cols = shape[1]
                v = qwen35_value_heads(nk, nv, dv)
                values = take(values, list(range(2 * keys)) + [2 * keys + r for r in v], cols)
            elif "in_proj_z" in hf:
                values = take(values, qwen35_value_heads(nk, nv, dv), shape[1])
            elif "in_proj_a" in hf or "in_proj_b" in hf:
                values = take(values, qwen35_value_heads(nk, nv, 1), shape[1])
            elif hf.endswith(("A_log", "dt_bias")):
                values = take(values, qwen35_value_heads(nk, nv, 1))
            elif "out_proj" in hf:
                values = take_columns(shape, values, qwen35_value_heads(nk, nv, dv))
        out.append(gguf_tensor(name, shape, values, matrix_type))
    return out


def qwen35_gguf(cfg, tensors, matrix_type, file_type, name):
    """(metadata, tensors) of a Qwen 3.5 checkpoint as the converter writes them: block_count
    counts the multi-token prediction layers (nextn_predict_layers) after the model's,
    attention.recurrent_layers marks the linear-attention ones, and the Gated DeltaNet's sizes
    are ssm.* (state_size the key heads' size, inner_size all value heads', group_count the key
    heads, time_step_rank the value heads)."""
    text = cfg["text_config"]
    rope = text["rope_parameters"]
    layers, mtp = text["num_hidden_layers"], text.get("mtp_num_hidden_layers", 0)
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    written = qwen35_tensors(cfg, tensors, matrix_type)
    meta = general_metadata("qwen35", name, written)
    sections = (list(rope["mrope_section"]) + [0, 0, 0, 0])[:4]
    meta.update({
        "qwen35.block_count": u32(layers + mtp),
        "qwen35.context_length": u32(text["max_position_embeddings"]),
        "qwen35.embedding_length": u32(text["hidden_size"]),
        "qwen35.feed_forward_length": u32(text["intermediate_size"]),
        "qwen35.attention.head_count": u32(text["num_attention_heads"]),
        "qwen35.attention.head_count_kv": u32(text["num_key_value_heads"]),
        "qwen35.rope.dimension_sections": gguf.Value(gguf.ARRAY, sections, gguf.INT32),
        "qwen35.rope.freq_base": float(rope["rope_theta"]),
        "qwen35.attention.layer_norm_rms_epsilon": float(text["rms_norm_eps"]),
        "qwen35.attention.key_length": u32(head_dim),
        "qwen35.attention.value_length": u32(head_dim),
        "general.file_type": u32(file_type),
    })
    if mtp:
        meta["qwen35.nextn_predict_layers"] = u32(mtp)
    recurrent = [t == "linear_attention" for t in text["layer_types"]] + [False] * mtp
    meta.update({
        "qwen35.ssm.conv_kernel": u32(text["linear_conv_kernel_dim"]),
        "qwen35.ssm.state_size": u32(text["linear_key_head_dim"]),
        "qwen35.ssm.group_count": u32(text["linear_num_key_heads"]),
        "qwen35.ssm.time_step_rank": u32(text["linear_num_value_heads"]),
        "qwen35.ssm.inner_size": u32(text["linear_value_head_dim"] *
                                     text["linear_num_value_heads"]),
        "qwen35.attention.recurrent_layers": gguf.Value(gguf.ARRAY, recurrent, gguf.BOOL),
        "qwen35.full_attention_interval": u32(text.get("full_attention_interval", 4)),
        "qwen35.rope.dimension_count": u32(int(head_dim * rope["partial_rotary_factor"])),
        "general.quantization_version": u32(2),
    })
    return meta, written


def family_checkpoint(family, name):
    directory = os.path.join(DATA, family, name)
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    return cfg, read_safetensors(os.path.join(directory, "model.safetensors"))


def write_lfm2_and_qwen35(out):
    """The tiny LFM 2 and Qwen 3.5 in BF16 with their tokenizers, their broken variants and
    Qwen 3.5's quantized pair. Returns {file: (metadata, tensors)} of the two tiny files."""
    made = {}
    cfg, tensors = family_checkpoint("lfm2", "tiny-bf16-tied")
    meta, written = lfm2_gguf(cfg, tensors, gguf.GGML_BF16, 32, "tiny LFM 2 (bf16, tied)")
    broken_variants(out, "lfm2", meta, written, {
        "missing": lambda m, t: [x for x in t if x.name != "blk.1.shortconv.conv.weight"],
        # the query's rows where the key's are: 4 key/value heads' where 2 are declared
        "shape": lambda m, t: [renamed(t, "blk.2.attn_q.weight", x.name)
                               if x.name == "blk.2.attn_k.weight" else x for x in t],
        "metadata": lambda m, t: m.pop("lfm2.shortconv.l_cache") and None,
    })
    tok, tok_config = tokenizer_files(os.path.join(DATA, "lfm2", "tokenizer"))
    meta.update(tokenizer_metadata(tok, tok_config, cfg, "lfm2"))
    made["lfm2-tiny-bf16-tied.gguf"] = (meta, written)

    cfg, tensors = family_checkpoint("qwen3_5", "tiny-bf16-tied")
    meta, written = qwen35_gguf(cfg, tensors, gguf.GGML_BF16, 32, "tiny Qwen 3.5 (bf16, tied)")
    broken_variants(out, "qwen35", meta, written, {
        "missing": lambda m, t: [x for x in t if x.name != "blk.0.ssm_a"],
        "metadata": lambda m, t: m.pop("qwen35.ssm.inner_size") and None,
        # a multi-token prediction head without its layer's query: the model runs, the head
        # is not there
        "head": lambda m, t: [x for x in t if x.name != "blk.4.attn_q.weight"],
    })
    quantized_pair(out, "qwen35-small", *cut_vocabulary("qwen35", meta, written))
    tok, tok_config = tokenizer_files("qwen3")
    meta.update(tokenizer_metadata(tok, tok_config, cfg, "qwen2"))
    made["qwen3_5-tiny-bf16-tied.gguf"] = (meta, written)
    for file, (meta, written) in made.items():
        gguf.write(os.path.join(out, file), meta, written)
    return made


def renamed(tensors, name, new_name):
    t = next(x for x in tensors if x.name == name)
    return gguf.Tensor(new_name, t.shape, t.ggml_type, t.data)


def cut_vocabulary(arch, meta, tensors):
    """(metadata, tensors) of the model with its vocabulary cut to 64 rows and no tokenizer: a
    few kB."""
    m = {k: v for k, v in meta.items() if not k.startswith("tokenizer.")}
    if arch + ".vocab_size" in m:
        m[arch + ".vocab_size"] = u32(64)
    t = []
    for x in tensors:
        if x.name in ("token_embd.weight", "output.weight"):
            x = gguf.Tensor(x.name, (64, x.shape[1]), x.ggml_type, x.data[:64 * x.shape[1]])
        t.append(x)
    return m, t


def broken_variants(out, arch, meta, tensors, edits):
    """bad-<arch>-<what>.gguf for each edit: the model cut (cut_vocabulary), then edit(metadata,
    tensors), which returns the tensors to write or None to keep them."""
    for what, edit in edits.items():
        m, t = cut_vocabulary(arch, meta, tensors)
        t = edit(m, t) or t
        gguf.write(os.path.join(out, "bad-%s-%s.gguf" % (arch, what)), m, t)


def quantized_pair(out, name, meta, tensors):
    """<name>-q8_0.gguf: the model with its matrices of whole Q8_0 rows in Q8_0 (as llama.cpp's
    quantizer leaves them: not the embedding, norms or convolution kernels), and
    <name>-q8_0-ref.gguf: the same with those matrices' dequantized values in F32."""
    quantized, ref = [], []
    for t in tensors:
        if (len(t.shape) == 2 and t.shape[1] % 32 == 0 and t.name != "token_embd.weight"
                and converter_type(t.name, t.shape, gguf.GGML_Q8_0) == gguf.GGML_Q8_0):
            values = t.data
            if t.ggml_type == gguf.GGML_BF16:
                values = array.array("f", array.array("I", (h << 16 for h in t.data)).tobytes())
            blocks = gguf.quantize_q8_0(values)
            quantized.append(gguf.Tensor(t.name, t.shape, gguf.GGML_Q8_0, blocks))
            ref.append(gguf.Tensor(t.name, t.shape, gguf.GGML_F32, gguf.dequantize_q8_0(blocks)))
        else:
            quantized.append(t)
            ref.append(t)
    gguf.write(os.path.join(out, name + "-q8_0.gguf"), dict(meta, **{"general.file_type": u32(7)}),
               quantized)
    gguf.write(os.path.join(out, name + "-q8_0-ref.gguf"), meta, ref)


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


def llamacpp_small():
    """(metadata, tensors) of llamacpp-small: F32, matrices included."""
    rng = random.Random(7)
    vocab, d, f, heads, kv, hd, blocks = 256, 128, 256, 4, 2, 32, 2
    cfg = dict(vocab_size=vocab, hidden_size=d, intermediate_size=f, num_hidden_layers=blocks,
               num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=256,
               rope_theta=10000.0, rms_norm_eps=1e-5)

    def t(name, *shape):
        n = 1
        for s in shape:
            n *= s
        values = (1 + rng.gauss(0, 0.1) if len(shape) == 1 else rng.gauss(0, 0.15)
                  for _ in range(n))
        return gguf.Tensor(name, shape, gguf.GGML_F32, array.array("f", values))
    tensors = [t("token_embd.weight", vocab, d), t("output_norm.weight", d)]
    for i in range(blocks):
        b = "blk.%d." % i
        tensors += [t(b + "attn_norm.weight", d), t(b + "attn_q.weight", heads * hd, d),
                    t(b + "attn_k.weight", kv * hd, d), t(b + "attn_v.weight", kv * hd, d),
                    t(b + "attn_output.weight", d, heads * hd), t(b + "ffn_norm.weight", d),
                    t(b + "ffn_gate.weight", f, d), t(b + "ffn_up.weight", f, d),
                    t(b + "ffn_down.weight", d, f)]
    metadata = llama_metadata(cfg, "llamacpp small", 0)
    metadata.update({
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "llama-bpe",
        "tokenizer.ggml.tokens": gguf.Value(gguf.ARRAY, ["t%d" % i for i in range(vocab)],
                                            gguf.STRING),
        "tokenizer.ggml.merges": gguf.Value(gguf.ARRAY, [], gguf.STRING),
        "tokenizer.ggml.eos_token_id": gguf.Value(gguf.UINT32, vocab - 1),
    })
    return metadata, tensors


QUANTIZERS = {gguf.GGML_Q8_0: gguf.quantize_q8_0, gguf.GGML_Q4_0: gguf.quantize_q4_0}


def write_llamacpp_small(out):
    metadata, tensors = llamacpp_small()
    gguf.write(os.path.join(out, "llamacpp-small-f32.gguf"), metadata, tensors)
    for name, ggml_type, file_type in (("q8_0", gguf.GGML_Q8_0, 7), ("q4_0", gguf.GGML_Q4_0, 2)):
        quantized = [gguf.Tensor(t.name, t.shape, ggml_type, QUANTIZERS[ggml_type](t.data))
                     if len(t.shape) == 2 else t for t in tensors]
        gguf.write(os.path.join(out, "llamacpp-small-%s.gguf" % name),
                   dict(metadata, **{"general.file_type": u32(file_type)}), quantized)


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
    tok, tok_config = tokenizer_files("llama3_1")

    _, cfg, tensors = checkpoint("tiny-f32")
    tokenizer_kv = tokenizer_metadata(tok, tok_config, cfg, "llama-bpe")
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
    write_lfm2_and_qwen35(out)
    write_llamacpp_small(out)
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
    _, tensors = llamacpp_small()
    compared = 0
    for t in tensors:
        if len(t.shape) == 1:
            continue
        data = np.frombuffer(t.data.tobytes(), dtype=np.float32).reshape(t.shape)
        for ggml_type, kind in ((gguf.GGML_Q8_0, package_quants.GGMLQuantizationType.Q8_0),
                                (gguf.GGML_Q4_0, package_quants.GGMLQuantizationType.Q4_0)):
            if QUANTIZERS[ggml_type](t.data) != package_quants.quantize(data, kind).tobytes():
                print("make_tiny_gguf --check: %s of llamacpp-small's %s differs from the gguf "
                      "package's" % (kind.name, t.name))
                return 1
        compared += 1
    print("make_tiny_gguf --check: Q8_0 and Q4_0 of llamacpp-small's %d matrices equal the gguf "
          "package's" % compared)
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
