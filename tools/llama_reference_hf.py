#!/usr/bin/env python3
"""Makes the reference outputs of tests/data/llama/* with Hugging Face transformers' own
LlamaForCausalLM: the second, independent check beside tools/make_tiny_llama.py's.

For each checkpoint directory holding a reference.json, it loads the model from the directory
as it is (config.json, model.safetensors; offline), computing in float32 with eager attention
whatever dtype the weights are stored in (as tools/make_tiny_llama.py computes), runs the
prompt of reference.json, decodes greedily with generate() and its cache as many tokens as
reference.json holds, and writes reference_hf.json in the same format. It prints, per
checkpoint, the largest |difference| of the recorded logits from reference.json's and both
greedy continuations, and exits non-zero where they disagree: by more than 1e-3, or 2e-2 for
a bf16 checkpoint, whose reference.json tools/make_tiny_llama.py computes in bf16. Tests
compare prism with every reference*.json they find.

  scripts/setup.sh --tools && .venv/bin/python tools/llama_reference_hf.py [tests/data/llama]
"""
import json
import os
import sys

import torch
import transformers
from transformers import LlamaForCausalLM

import tiny_lm


def main():
    torch.manual_seed(0)
    print("torch", torch.__version__, "transformers", transformers.__version__)
    failures = 0
    for name, path, ours in tiny_lm.reference_dirs("llama"):
        model = tiny_lm.from_pretrained_f32(LlamaForCausalLM, path)
        model.eval()
        ids = torch.tensor([ours["prompt_ids"]])
        steps = len(ours["greedy_ids"])
        with torch.no_grad():
            first = model(ids).logits[0, -1].float()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=steps,
                                 min_new_tokens=steps, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)
        result = {
            "prompt_ids": ours["prompt_ids"],
            "greedy_ids": out[0, ids.shape[1]:].tolist(),
            "first_logits": {k: float(first[int(k)]) for k in ours["first_logits"]},
            "made_with": f"transformers {transformers.__version__} LlamaForCausalLM, float32, "
                         f"eager attention, torch {torch.__version__}",
        }
        tiny_lm.write_json(os.path.join(path, "reference_hf.json"), result, indent=1)
        diff = max(abs(result["first_logits"][k] - v) for k, v in ours["first_logits"].items())
        same = result["greedy_ids"] == ours["greedy_ids"]
        print(f"{name}: first-step logits max |diff| against reference.json: {diff:.3g}")
        print(f"  transformers:   {result['greedy_ids']}")
        print(f"  reference.json: {ours['greedy_ids']}")
        print(f"  greedy ids {'equal' if same else 'DIFFER'}")
        with open(os.path.join(path, "config.json")) as f:
            stored = json.load(f).get("torch_dtype", "float32")
        failures += int(diff > (2e-2 if stored == "bfloat16" else 1e-3) or not same)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
