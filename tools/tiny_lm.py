"""What the tiny language-model fixture scripts share: the tests/data/<model>/<name>/ layout,
a safetensors writer, the reference.json format, greedy decoding, and the layers that Llama,
LFM 2 and Qwen 3.5 compute alike in Hugging Face's modeling files (RMSNorm and its 1 + w
form, rotate-half rope, causal grouped-query attention, the SwiGLU MLP, a depthwise causal
convolution). What makes each model itself stays in its own script: tools/make_tiny_llama.py,
tools/make_tiny_lfm2.py, tools/make_tiny_qwen3_5.py, and the tools/*_reference_hf.py that
remake the references with transformers' classes.

The scripts import it as a sibling (`import tiny_lm`), which works from any directory since
Python puts a script's own directory first on its path.
"""
import dataclasses
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fixture_root(model):
    """tests/data/<model> of the repository, where the checkpoints of `model` live."""
    return os.path.join(ROOT, "tests/data", model)


# --- Writing a checkpoint ----------------------------------------------------------------


def write_json(path, value, indent):
    with open(path, "w") as f:
        json.dump(value, f, indent=indent)


def write_safetensors(path, tensors):
    """`tensors` (name -> F32 or BF16 tensor) as one safetensors file: names sorted, no gaps,
    the JSON header padded with spaces to a multiple of 8 bytes, as Hugging Face writes it."""
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


def write_checkpoint(out, config, generation_config, tensors):
    """config.json, generation_config.json and model.safetensors into the directory `out`."""
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "config.json"), config, indent=2)
    write_json(os.path.join(out, "generation_config.json"), generation_config, indent=2)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)


# --- Random weights ----------------------------------------------------------------------
# Each draws from torch's global generator, seeded by the caller: the order of the calls is
# part of a fixture.


def randn_fan_in(*shape):
    """Normal values scaled by 1/sqrt(the last dimension), the fan-in of a linear layer or a
    convolution, so that activations keep their size through a random network."""
    return torch.randn(*shape) / math.sqrt(shape[-1])


# --- Reference outputs -------------------------------------------------------------------


@dataclasses.dataclass
class Greedy:
    """A greedy continuation: `ids` (the new tokens), `first_logits` (the prompt's
    last-position logits) and `margin`, the smallest gap between the best and second-best
    logit along the way (a test whose logit tolerance is well below it cannot flip a
    near-tie)."""
    ids: list
    first_logits: torch.Tensor
    margin: float


def greedy(forward, prompt, steps):
    """`steps` greedy tokens after `prompt`, where forward(ids) gives the logits of every
    position of the list `ids`, recomputed from scratch for each token."""
    ids = list(prompt)
    first_logits, margin = None, float("inf")
    with torch.no_grad():
        for _ in range(steps):
            logits = forward(ids)[-1]
            if first_logits is None:
                first_logits = logits
            top = logits.topk(2).values
            margin = min(margin, float(top[0] - top[1]))
            ids.append(int(logits.argmax()))
    return Greedy(ids[len(prompt):], first_logits, margin)


def probe_ids(logits, top, also):
    """The ids at which reference.json records logits: the `top` largest and those of
    `also`, sorted."""
    return sorted(set(int(i) for i in logits.topk(top).indices) | set(also))


def reference_json(prompt, result, probe, made_with=None):
    """The reference.json of a fixture, which the tests read: the prompt, the greedy ids, the
    first step's logits at the ids of `probe`, and what made them."""
    value = {
        "prompt_ids": list(prompt),
        "greedy_ids": result.ids,
        "first_logits": {str(i): float(result.first_logits[i]) for i in probe},
    }
    if made_with:
        value["made_with"] = made_with
    return value


def reference_dirs(model):
    """(name, directory, its reference.json) for each checkpoint of `model` that has one,
    under the directory given as the first argument, else tests/data/<model>: the command
    line of the *_reference_hf.py scripts."""
    root = sys.argv[1] if len(sys.argv) > 1 else fixture_root(model)
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not os.path.isfile(os.path.join(path, "reference.json")):
            continue
        with open(os.path.join(path, "reference.json")) as f:
            yield name, path, json.load(f)


def from_pretrained_f32(cls, path, **kwargs):
    """cls.from_pretrained(path) computing in float32, offline, with eager attention, under
    the dtype argument's newer name or, for older transformers, its older one."""
    common = dict(attn_implementation="eager", local_files_only=True, **kwargs)
    try:
        return cls.from_pretrained(path, dtype=torch.float32, **common)
    except TypeError:  # transformers before `dtype` replaced `torch_dtype`
        return cls.from_pretrained(path, torch_dtype=torch.float32, **common)


# --- Layers, as Hugging Face's modeling files compute them --------------------------------


def rms_normalize(x, eps):
    """x / rms(x) over the last dimension, computed in float32, in x's dtype."""
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x.to(dtype)


def rms_norm(x, w, eps):
    """RMSNorm scaling by w (Llama, LFM 2)."""
    return w * rms_normalize(x, eps)


def rms_norm_one_plus(x, w, eps):
    """RMSNorm scaling by 1 + w, the stored weight being the offset from one (Qwen 3.5)."""
    return rms_normalize(x, eps) * (1.0 + w)


def inv_frequencies(theta, dim):
    """The default rope's inverse frequencies for `dim` rotated dimensions."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


def rope_cos_sin(inv, n, dtype=torch.float32):
    """cos and sin {n, 2 len(inv)} of positions 0..n-1, each frequency twice (rotate-half
    layout), in `dtype`."""
    freqs = torch.arange(n, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def apply_rope(x, cos, sin):
    """Rotate-half rope of x {..., n, 2 len(inv)}."""
    return x * cos + rotate_half(x) * sin


def causal_attention(q, k, v):
    """Causal softmax attention of q {heads, n, head_dim} over k, v {kv_heads, n, head_dim},
    each kv head serving heads / kv_heads consecutive query heads (grouped-query attention);
    softmax in float32; the result {n, heads * head_dim}."""
    nh, n, hd = q.shape
    k = k.repeat_interleave(nh // k.shape[0], dim=0)
    v = v.repeat_interleave(nh // v.shape[0], dim=0)
    causal = torch.full((n, n), float("-inf")).triu(1)
    scores = (q @ k.transpose(1, 2)) * hd ** -0.5 + causal
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return (probs @ v).transpose(0, 1).reshape(n, nh * hd)


def swiglu(h, gate, up, down):
    """The gated MLP: down(silu(gate(h)) * up(h)), each argument a {out, in} weight."""
    return (F.silu(h @ gate.T) * (h @ up.T)) @ down.T


def causal_conv1d(x, kernel):
    """The depthwise causal convolution of x {n, channels} by kernel {channels, taps}: out[t]
    = sum_j kernel[:, j] * x[t - (taps - 1) + j], zeros before the start, so tap taps-1
    multiplies the newest input."""
    taps = kernel.shape[1]
    padded = torch.cat((torch.zeros(taps - 1, x.shape[1]), x), dim=0)
    return torch.stack([(padded[t:t + taps] * kernel.T).sum(0) for t in range(x.shape[0])])
