"""The PyTorch side of `prism-bench llm`: a Llama forward in plain eager PyTorch with a KV cache,
on the CPU, over the checkpoint the benchmark writes (model.safetensors and config.json), in
bf16 or f32. Prints what prism measures on its side, one `key value` line each:
  prefill_tok_s  <the prompt into an empty cache, tokens/s, median of PREFILL_RUNS>
  decode_tok_s   <1 / the median seconds of the DECODE greedy steps after that prompt>
  greedy_long    <the greedy ids after the prompt: its first, then the DECODE steps>
  greedy_short   <SHORT_STEPS greedy ids after the SHORT prompt>
  forced_short   <the most likely next id at each of those steps when fed FORCED instead>
  threads        <torch.get_num_threads()>

  python llm_torch_peer.py MODEL_DIR THREADS PROMPT_IDS DECODE SHORT_IDS SHORT_STEPS
         PREFILL_RUNS FORCED_IDS --dtype=bf16|f32          (id lists comma separated)

The forward is Hugging Face's LlamaForCausalLM written out: RMSNorm in f32 and scaled back to
the weights' type, the rope on halves (rotate_half; the safetensors keep Hugging Face's q/k row
order), grouped-query attention through torch's scaled_dot_product_attention, SwiGLU, tied
output embedding; every product a torch.nn.functional.linear in the chosen type. The checkpoint
has no rope scaling (tools/make_bench_llama.py), so none is applied here. One step's time is
its forward up to the logits, as on prism's side.
"""
import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file


class Llama:
    """The forward over weights in memory: `cfg` as config.json holds it, `weights` by their
    safetensors names (moved to `device` and `dtype` one by one)."""

    @staticmethod
    def from_directory(directory, dtype, max_positions):
        with open(os.path.join(directory, "config.json")) as f:
            cfg = json.load(f)
        return Llama(cfg, load_file(os.path.join(directory, "model.safetensors")), dtype,
                     max_positions)

    def __init__(self, cfg, weights, dtype, max_positions, device="cpu"):
        self.layers = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg["num_key_value_heads"]
        self.head_dim = cfg.get("head_dim", cfg["hidden_size"] // self.heads)
        self.eps = cfg["rms_norm_eps"]
        assert cfg.get("tie_word_embeddings", False), "the bench checkpoint ties its embeddings"
        assert not cfg.get("rope_scaling"), "the bench checkpoint has no rope scaling"
        self.dtype = dtype
        self.device = device
        # Converted one by one, so that a f32 copy never sits beside all of the bf16 one.
        self.w = {}
        for name in list(weights):
            self.w[name] = weights.pop(name).to(device=device, dtype=dtype).contiguous()
        theta = cfg["rope_theta"]
        inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) /
                                    self.head_dim))
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.cos = angles.cos().to(device=device, dtype=dtype)
        self.sin = angles.sin().to(device=device, dtype=dtype)
        shape = (self.layers, self.kv_heads, max_positions, self.head_dim)
        self.k_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.v_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    def reset(self):
        self.length = 0

    def norm(self, x, weight):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * h.to(self.dtype)

    @staticmethod
    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat([-x[..., half:], x[..., :half]], dim=-1)

    def forward(self, ids, first_out=-1):
        """Appends `ids` to the cache; the logits (f32) of the positions from first_out on."""
        n, start = len(ids), self.length
        end = start + n
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids, device=self.device)]
        cos, sin = self.cos[start:end], self.sin[start:end]
        mask = None
        if n > 1 and start > 0:  # queries after cached keys: causal over the whole range
            mask = torch.ones(n, end, dtype=torch.bool, device=self.device).tril(diagonal=start)
        for i in range(self.layers):
            p = "model.layers.%d." % i
            h = self.norm(x, self.w[p + "input_layernorm.weight"])
            q = F.linear(h, self.w[p + "self_attn.q_proj.weight"])
            k = F.linear(h, self.w[p + "self_attn.k_proj.weight"])
            v = F.linear(h, self.w[p + "self_attn.v_proj.weight"])
            q = q.view(n, self.heads, self.head_dim).transpose(0, 1)
            k = k.view(n, self.kv_heads, self.head_dim).transpose(0, 1)
            v = v.view(n, self.kv_heads, self.head_dim).transpose(0, 1)
            q = q * cos + self.rotate_half(q) * sin
            k = k * cos + self.rotate_half(k) * sin
            self.k_cache[i, :, start:end] = k
            self.v_cache[i, :, start:end] = v
            a = F.scaled_dot_product_attention(
                q.unsqueeze(0), self.k_cache[i, :, :end].unsqueeze(0),
                self.v_cache[i, :, :end].unsqueeze(0), attn_mask=mask,
                is_causal=n > 1 and start == 0, enable_gqa=True)
            a = a.squeeze(0).transpose(0, 1).reshape(n, self.heads * self.head_dim)
            x = x + F.linear(a, self.w[p + "self_attn.o_proj.weight"])
            h = self.norm(x, self.w[p + "post_attention_layernorm.weight"])
            gate = F.linear(h, self.w[p + "mlp.gate_proj.weight"])
            up = F.linear(h, self.w[p + "mlp.up_proj.weight"])
            x = x + F.linear(F.silu(gate) * up, self.w[p + "mlp.down_proj.weight"])
        self.length = end
        out = x[first_out if first_out >= 0 else n - 1:]
        out = self.norm(out, self.w["model.norm.weight"])
        return F.linear(out, self.w["model.embed_tokens.weight"]).float()


def median(values):
    """The upper middle value, as the C++ side takes it."""
    return sorted(values)[len(values) // 2]


def greedy(model, prompt, steps, seconds=None):
    model.reset()
    out = [int(model.forward(prompt)[-1].argmax())]
    while len(out) < steps:
        start = time.perf_counter()
        logits = model.forward([out[-1]])
        if seconds is not None:
            seconds.append(time.perf_counter() - start)
        out.append(int(logits[-1].argmax()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("threads", type=int)
    ap.add_argument("prompt")
    ap.add_argument("decode", type=int)
    ap.add_argument("short")
    ap.add_argument("short_steps", type=int)
    ap.add_argument("prefill_runs", type=int)
    ap.add_argument("forced")
    ap.add_argument("--dtype", choices=("bf16", "f32"), default="bf16")
    args = ap.parse_args()

    def ids(s):
        return [int(i) for i in s.split(",")]

    prompt, short, forced = ids(args.prompt), ids(args.short), ids(args.forced)
    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    positions = max(len(prompt) + args.decode + 1, len(short) + args.short_steps)
    with torch.inference_mode():
        model = Llama.from_directory(args.model, dtype, positions)
        prefill = []
        for _ in range(args.prefill_runs):
            model.reset()
            start = time.perf_counter()
            model.forward(prompt)
            prefill.append(len(prompt) / (time.perf_counter() - start))
        steps = []
        long_ids = greedy(model, prompt, args.decode + 1, steps)
        short_ids = greedy(model, short, args.short_steps)
        model.reset()
        logits = model.forward(short + forced[:args.short_steps - 1], first_out=len(short) - 1)
        forced_next = [int(i) for i in logits.argmax(-1)]
    print("prefill_tok_s %.2f" % median(prefill))
    print("decode_tok_s %.3f" % (1 / median(steps)))
    print("greedy_long " + ",".join(map(str, long_ids)))
    print("greedy_short " + ",".join(map(str, short_ids)))
    print("forced_short " + ",".join(map(str, forced_next)))
    print("threads %d" % torch.get_num_threads())


if __name__ == "__main__":
    main()
