#!/usr/bin/env python3
"""Makes the reference outputs of tests/data/lfm2/* with Hugging Face transformers' own
Lfm2ForCausalLM (the PyTorch and transformers of scripts/requirements/tools.txt): the second,
independent check beside tools/make_tiny_lfm2.py's.

For each checkpoint directory holding a reference.json, it loads the model from the directory
as it is (config.json, model.safetensors; offline), computing in float32 with eager attention,
runs the prompt of reference.json, decodes greedily through the model's own decode state (its
KV and convolution caches) as many tokens as reference.json holds, and writes
reference_hf.json in the same format. It prints, per checkpoint, the largest |difference| of
the recorded logits from reference.json's, and both greedy continuations. Tests compare prism
with every reference*.json they find.

  scripts/setup.sh --tools && .venv/bin/python tools/lfm2_reference_hf.py [tests/data/lfm2]
"""
import os
import sys

import torch
import transformers
from transformers import Lfm2ForCausalLM

import tiny_lm


def load(path):
    model = tiny_lm.from_pretrained_f32(Lfm2ForCausalLM, path)
    model.eval()
    return model.float()


def greedy(model, prompt, steps):
    """The prompt's last-position logits and `steps` greedy ids, fed one token at a time
    after the prompt through the model's cache (the path a chat takes)."""
    ids = torch.tensor([prompt])
    out = model(input_ids=ids, use_cache=True)
    first = out.logits[0, -1].float()
    cache, logits, tokens = out.past_key_values, first, []
    for _ in range(steps):
        nxt = int(logits.argmax())
        tokens.append(nxt)
        if len(tokens) == steps:
            break
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=cache, use_cache=True)
        cache, logits = out.past_key_values, out.logits[0, -1].float()
    return first, tokens


def greedy_recomputed(model, prompt, steps):
    """The same continuation with no cache: the whole sequence recomputed for each token."""
    seq = list(prompt)
    for _ in range(steps):
        seq.append(int(model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].argmax()))
    return seq[len(prompt):]


def main():
    torch.manual_seed(0)
    print("torch", torch.__version__, "transformers", transformers.__version__)
    failures = 0
    for name, path, ours in tiny_lm.reference_dirs("lfm2"):
        model = load(path)
        steps = len(ours["greedy_ids"])
        with torch.no_grad():
            first, tokens = greedy(model, ours["prompt_ids"], steps)
            recomputed = greedy_recomputed(model, ours["prompt_ids"], steps)
        result = {
            "prompt_ids": ours["prompt_ids"],
            "greedy_ids": tokens,
            "first_logits": {k: float(first[int(k)]) for k in ours["first_logits"]},
            "made_with": f"transformers {transformers.__version__} Lfm2ForCausalLM, float32, eager",
        }
        tiny_lm.write_json(os.path.join(path, "reference_hf.json"), result, indent=0)
        diff = max(abs(result["first_logits"][k] - v) for k, v in ours["first_logits"].items())
        same = tokens == ours["greedy_ids"]
        print(f"{name}: max |logit diff| vs reference.json {diff:.3g}")
        print(f"  transformers (cached):     {tokens}")
        print(f"  transformers (recomputed): {recomputed}")
        print(f"  reference.json:            {ours['greedy_ids']}")
        print(f"  greedy ids {'equal' if same else 'DIFFER'}"
              f"{'' if recomputed == tokens else '; cached and recomputed DIFFER'}")
        failures += int(diff > 1e-3 or not same)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
