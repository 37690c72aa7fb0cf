#!/usr/bin/env python3
"""Makes the reference outputs of tests/data/llama/* with Hugging Face transformers' own
LlamaForCausalLM, for a machine that has PyTorch 2 and transformers (this one has neither
new enough): the second, independent check beside tools/make_tiny_llama.py's.

For each checkpoint directory it loads the model from the directory as it is (config.json,
model.safetensors), runs the prompt of reference.json, decodes greedily as many tokens as
reference.json holds, and writes reference_hf.json in the same format. Tests compare prism
with every reference_*.json they find.

  python3 tools/llama_reference_hf.py [tests/data/llama]
"""
import os

import torch
from transformers import LlamaForCausalLM

import tiny_lm


def main():
    torch.manual_seed(0)
    for name, path, ours in tiny_lm.reference_dirs("llama"):
        model = LlamaForCausalLM.from_pretrained(path, torch_dtype="auto",
                                                 attn_implementation="eager")
        model.eval()
        ids = torch.tensor([ours["prompt_ids"]])
        with torch.no_grad():
            first = model(ids).logits[0, -1].float()
            out = model.generate(ids, max_new_tokens=len(ours["greedy_ids"]), do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
        result = {
            "prompt_ids": ours["prompt_ids"],
            "greedy_ids": out[0, ids.shape[1]:].tolist(),
            "first_logits": {k: float(first[int(k)]) for k in ours["first_logits"]},
            "made_with": "transformers LlamaForCausalLM",
        }
        tiny_lm.write_json(os.path.join(path, "reference_hf.json"), result, indent=1)
        print(name, "greedy:", result["greedy_ids"])


if __name__ == "__main__":
    main()
