"""PyTorch's side of `prism-bench llm-shapes` on a GPU: the same Llama 3.2 1B-shaped steps
(random weights, a cache of 1024 positions), a prefill of 512 tokens into an empty cache and
decode steps at position 512 on, in bf16 and f32, with the GPU's limits measured by torch in
the same run:

  python bench/llm_shapes_torch.py [--device=cuda] [--compile] [--dtypes=bf16,f32]

Eager is bench/llm_torch_peer.py's forward (Hugging Face's LlamaForCausalLM written out: SDPA
attention over the cached positions, every product a torch.nn.functional.linear). --compile
adds torch.compile of a decode step with static shapes (attention over the whole cache under
a position mask, as prism's decode step reads it) in mode "reduce-overhead" (CUDA graphs, as
prism replays its step), after a warm-up that pays for the compile. Times are medians, each
step ended by torch.cuda.synchronize(). One line per figure:

  limits  copy_gbps <read + write of 1 GiB>  bf16_tflops <8192^3 product, random values>
  bf16 eager prefill_tok_s <...> decode_tok_s <...>
  bf16 compiled decode_tok_s <...>
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llm_torch_peer import Llama  # noqa: E402

CONFIG = {  # bench/llm_shapes_bench.cpp's llama_1b()
    "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
    "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 64, "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
}
WINDOW, SEQLEN = 512, 1024


def random_weights(device):
    c = CONFIG
    d, f, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": (c["vocab_size"], d), "model.norm.weight": (d,)}
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        shapes.update({
            p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (q, d), p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, q),
            p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
            p + "mlp.down_proj.weight": (d, f)})
    g = torch.Generator(device=device).manual_seed(0)
    return {name: torch.randn(shape, generator=g, device=device, dtype=torch.bfloat16) * 0.02
            for name, shape in shapes.items()}


def median_seconds(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def limits(device):
    x = torch.empty(1 << 29, dtype=torch.bfloat16, device=device)
    copy = min(median_seconds(lambda: x.clone(), 5) for _ in range(2))
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    mm = median_seconds(lambda: a @ b, 10)
    return 2 * x.numel() * 2 / copy / 1e9, 2 * n ** 3 / mm / 1e12


def static_decode(model):
    """One decode step over the whole cache (positions past `pos` masked), shapes fixed."""
    heads, kv_heads, hd = model.heads, model.kv_heads, model.head_dim
    w = model.w

    def step(token, pos):
        x = w["model.embed_tokens.weight"][token]  # {1, d}
        cos = model.cos.index_select(0, pos)
        sin = model.sin.index_select(0, pos)
        mask = (torch.arange(SEQLEN, device=token.device) <= pos).view(1, 1, 1, SEQLEN)
        for i in range(model.layers):
            p = "model.layers.%d." % i
            h = model.norm(x, w[p + "input_layernorm.weight"])
            q = F.linear(h, w[p + "self_attn.q_proj.weight"]).view(1, heads, hd).transpose(0, 1)
            k = F.linear(h, w[p + "self_attn.k_proj.weight"]).view(1, kv_heads, hd).transpose(0, 1)
            v = F.linear(h, w[p + "self_attn.v_proj.weight"]).view(1, kv_heads, hd).transpose(0, 1)
            q = q * cos + model.rotate_half(q) * sin
            k = k * cos + model.rotate_half(k) * sin
            model.k_cache[i].index_copy_(1, pos, k)
            model.v_cache[i].index_copy_(1, pos, v)
            a = F.scaled_dot_product_attention(q.unsqueeze(0), model.k_cache[i].unsqueeze(0),
                                               model.v_cache[i].unsqueeze(0), attn_mask=mask,
                                               enable_gqa=True)
            x = x + F.linear(a.squeeze(0).transpose(0, 1).reshape(1, heads * hd),
                             w[p + "self_attn.o_proj.weight"])
            h = model.norm(x, w[p + "post_attention_layernorm.weight"])
            gate = F.linear(h, w[p + "mlp.gate_proj.weight"])
            up = F.linear(h, w[p + "mlp.up_proj.weight"])
            x = x + F.linear(F.silu(gate) * up, w[p + "mlp.down_proj.weight"])
        return F.linear(model.norm(x, w["model.norm.weight"]), w["model.embed_tokens.weight"])

    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    dtypes = {"bf16": torch.bfloat16, "f32": torch.float32}
    for name in args.dtypes.split(","):
        if name not in dtypes:
            ap.error("--dtypes: %r is not bf16 or f32" % name)
    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU: torch.cuda.is_available() is false here")
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 products in f32, as prism's
    with torch.inference_mode():
        gbps, tflops = limits(args.device)
        print("limits copy_gbps %.0f bf16_tflops %.1f (%s)" %
              (gbps, tflops, torch.cuda.get_device_name()), flush=True)
        for name in args.dtypes.split(","):
            dtype = dtypes[name]
            model = Llama(dict(CONFIG), random_weights(args.device), dtype, SEQLEN,
                          device=args.device)
            prompt = [int(i) for i in torch.randint(0, CONFIG["vocab_size"], (WINDOW,))]

            def prefill():
                model.reset()
                model.forward(prompt)

            p = median_seconds(prefill, 5)

            def decode():
                model.length = WINDOW
                model.forward([7])

            d = median_seconds(decode, 20)
            print("%s eager prefill_tok_s %.1f decode_tok_s %.1f" % (name, WINDOW / p, 1 / d),
                  flush=True)
            if args.compile:
                step = torch.compile(static_decode(model), mode="reduce-overhead")
                token = torch.tensor([7], device=args.device)
                pos = torch.tensor([WINDOW], device=args.device)
                start = time.perf_counter()
                for _ in range(3):
                    step(token, pos)
                warm = time.perf_counter() - start
                d = median_seconds(lambda: step(token, pos), 20)
                print("%s compiled decode_tok_s %.1f (compile and warm-up %.0f s)" %
                      (name, 1 / d, warm), flush=True)
            del model
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
