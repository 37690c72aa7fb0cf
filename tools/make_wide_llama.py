#!/usr/bin/env python3
"""Writes a small random-weight Llama checkpoint (f32 safetensors and config.json, no
tokenizer) whose rows are whole Q4_K blocks (width 256, MLP 512, one layer, vocabulary 512): the
tiny checkpoints of tests/data/llama/ are too narrow for 256-element blocks. Plain Python.

  python3 tools/make_wide_llama.py DIR [TENSOR ...]   (the tensors named are left out)
"""
import array
import json
import os
import random
import struct
import sys

out, skip = sys.argv[1], sys.argv[2:]
os.makedirs(out, exist_ok=True)
d, f, heads, kv, hd, vocab = 256, 512, 4, 2, 64, 512
cfg = dict(model_type="llama", vocab_size=vocab, hidden_size=d, intermediate_size=f,
           num_hidden_layers=1, num_attention_heads=heads, num_key_value_heads=kv,
           max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-5,
           tie_word_embeddings=False, torch_dtype="float32", eos_token_id=0)
json.dump(cfg, open(out + "/config.json", "w"))
rng = random.Random(5)
shapes = {"model.embed_tokens.weight": [vocab, d], "lm_head.weight": [vocab, d],
          "model.norm.weight": [d], "model.layers.0.input_layernorm.weight": [d],
          "model.layers.0.post_attention_layernorm.weight": [d],
          "model.layers.0.self_attn.q_proj.weight": [heads * hd, d],
          "model.layers.0.self_attn.k_proj.weight": [kv * hd, d],
          "model.layers.0.self_attn.v_proj.weight": [kv * hd, d],
          "model.layers.0.self_attn.o_proj.weight": [d, heads * hd],
          "model.layers.0.mlp.gate_proj.weight": [f, d], "model.layers.0.mlp.up_proj.weight": [f, d],
          "model.layers.0.mlp.down_proj.weight": [d, f]}
header, blobs, offset = {}, [], 0
for name, shape in shapes.items():
    if name in skip: continue
    n = 1
    for s in shape: n *= s
    v = array.array("f", [1.0 + rng.gauss(0, 0.1) if len(shape) == 1 else rng.gauss(0, 0.3) for _ in range(n)])
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + 4 * n]}
    blobs.append(v.tobytes()); offset += 4 * n
text = json.dumps(header).encode(); text += b" " * (-len(text) % 8)
with open(out + "/model.safetensors", "wb") as fh:
    fh.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
