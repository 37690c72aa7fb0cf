#!/usr/bin/env python3
"""Makes the reference outputs of tests/data/qwen3_5/* with Hugging Face transformers' own
Qwen 3.5 classes (the PyTorch and transformers of scripts/requirements/tools.txt): the second,
independent check beside tools/make_tiny_qwen3_5.py's.

Each fixture is the multimodal composite as published (config.json with text_config and
vision_config, weights model.language_model.* beside model.visual.* and mtp.*), so it loads
with the class transformers maps model_type "qwen3_5" to, Qwen3_5ForConditionalGeneration,
offline, in float32, with eager attention; the text-only forward of that class is the
language model plus the tied lm_head. Should that class fail to load, the script falls back
to Qwen3_5ForCausalLM on text_config with the model.language_model.* weights renamed to
model.*, and says so.

For each checkpoint directory it checks that every language-model tensor of the file arrived
in the model unchanged, runs the prompt of reference.json without a cache, decodes greedily
as many tokens as reference.json holds (recomputing the whole sequence each step, which runs
the chunked gated delta rule), also decodes with generate() and its cache (the recurrent
form) as a cross-check, prints max |diff| of the first-step logits against reference.json
and both greedy sequences, and writes reference_hf.json in the same format. Tests compare
prism with every reference*.json they find.

  scripts/setup.sh --tools && .venv/bin/python tools/qwen3_5_reference_hf.py [tests/data/qwen3_5]
"""
import os
import sys
import traceback

import torch

import tiny_lm


def load_file_tensors(path):
    from safetensors.torch import load_file
    tensors = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(path, name)))
    return tensors


def use_torch_kernels(model):
    """Best effort: keep the pure PyTorch gated delta rule and convolution even where an
    optional kernel package (flash-linear-attention, causal-conv1d) is installed, so the
    computation stays in float32 on the CPU."""
    import transformers.models.qwen3_5.modeling_qwen3_5 as m
    swaps = {"chunk_gated_delta_rule": getattr(m, "torch_chunk_gated_delta_rule", None),
             "recurrent_gated_delta_rule": getattr(m, "torch_recurrent_gated_delta_rule", None),
             "causal_conv1d_fn": None, "causal_conv1d_update": None}
    for module in model.modules():
        if type(module).__name__.endswith("GatedDeltaNet"):
            for attr, value in swaps.items():
                if hasattr(module, attr) and (value is not None or attr.startswith("causal")):
                    setattr(module, attr, value)


def load_model(path, file_tensors):
    """The model and the prefix its language-model weights have in its state dict."""
    try:
        from transformers import Qwen3_5ForConditionalGeneration
        model, info = tiny_lm.from_pretrained_f32(
            Qwen3_5ForConditionalGeneration, path, output_loading_info=True)
        tied = "lm_head.weight" not in file_tensors
        missing = [k for k in info.get("missing_keys", [])
                   if "visual" not in k and not (tied and k == "lm_head.weight")]
        mismatched = info.get("mismatched_keys", [])
        if missing or mismatched:
            raise RuntimeError(f"missing {missing}, mismatched {mismatched}")
        return model, "model.language_model.", "transformers Qwen3_5ForConditionalGeneration"
    except Exception:  # noqa: BLE001 - report and try the text-only class
        traceback.print_exc()
        print(f"{path}: Qwen3_5ForConditionalGeneration failed; trying Qwen3_5ForCausalLM")
    from transformers import AutoConfig, Qwen3_5ForCausalLM
    tied = "lm_head.weight" not in file_tensors
    config = AutoConfig.from_pretrained(path, local_files_only=True).text_config
    config.tie_word_embeddings = tied
    config._attn_implementation = "eager"
    model = Qwen3_5ForCausalLM(config).to(torch.float32)
    state = {"model." + k[len("model.language_model."):]: v.float()
             for k, v in file_tensors.items() if k.startswith("model.language_model.")}
    if "lm_head.weight" in file_tensors:
        state["lm_head.weight"] = file_tensors["lm_head.weight"].float()
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not (tied and k == "lm_head.weight")]
    if missing or result.unexpected_keys:
        sys.exit(f"{path}: Qwen3_5ForCausalLM: missing {missing}, "
                 f"unexpected {result.unexpected_keys}")
    if tied:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model, "model.", "transformers Qwen3_5ForCausalLM (weights renamed)"


def check_weights(model, prefix, file_tensors):
    """Every model.language_model.* tensor of the file, and the head, in the model unchanged
    (as f32): the largest difference, 0 when all arrived."""
    state = model.state_dict()
    worst = 0.0
    for name, t in file_tensors.items():
        if not name.startswith("model.language_model."):
            continue
        key = prefix + name[len("model.language_model."):]
        if key not in state:
            sys.exit(f"weight {name} is not in the model (looked for {key})")
        loaded = state[key]
        if loaded.dtype != torch.float32:
            sys.exit(f"weight {key} is {loaded.dtype}, not float32")
        worst = max(worst, float((loaded - t.float()).abs().max()))
    # The head: the file's lm_head.weight where it has one, else the embeddings (tied).
    head = model.get_output_embeddings().weight.detach()
    want = file_tensors.get("lm_head.weight",
                            file_tensors["model.language_model.embed_tokens.weight"])
    if head.shape != want.shape:
        sys.exit(f"the model's lm_head is {list(head.shape)}, the file's {list(want.shape)}")
    worst = max(worst, float((head - want.float()).abs().max()))
    return worst


def main():
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    import transformers
    print("torch", torch.__version__, "transformers", transformers.__version__)
    failures = 0
    for name, path, ours in tiny_lm.reference_dirs("qwen3_5"):
        file_tensors = load_file_tensors(path)
        model, prefix, made_with = load_model(path, file_tensors)
        use_torch_kernels(model)
        model.eval()
        weight_diff = check_weights(model, prefix, file_tensors)
        steps = len(ours["greedy_ids"])
        ids = list(ours["prompt_ids"])
        first = None
        with torch.no_grad():
            for _ in range(steps):
                logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
                if first is None:
                    first = logits.float()
                ids.append(int(logits.argmax()))
        greedy = ids[len(ours["prompt_ids"]):]
        cached = None
        try:
            with torch.no_grad():
                prompt = torch.tensor([ours["prompt_ids"]])
                out = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                     max_new_tokens=steps, min_new_tokens=steps,
                                     do_sample=False, eos_token_id=None, pad_token_id=0)
            cached = out[0, prompt.shape[1]:].tolist()
        except Exception:  # noqa: BLE001 - the cross-check is optional
            traceback.print_exc()
        diff = max(abs(float(first[int(k)]) - v) for k, v in ours["first_logits"].items())
        result = {
            "prompt_ids": ours["prompt_ids"],
            "greedy_ids": greedy,
            "first_logits": {k: float(first[int(k)]) for k in ours["first_logits"]},
            "made_with": f"{made_with}, float32, eager attention, transformers "
                         f"{transformers.__version__}, torch {torch.__version__}",
        }
        tiny_lm.write_json(os.path.join(path, "reference_hf.json"), result, indent=1)
        same = greedy == ours["greedy_ids"]
        agree = same and diff <= 1e-3 and weight_diff == 0
        failures += not agree
        print(f"{name}: loaded with {made_with}; weights max |diff| {weight_diff:.3g}")
        print(f"{name}: first-step logits max |diff| against reference.json: {diff:.3g}")
        print(f"{name}: greedy (transformers, no cache): {greedy}")
        print(f"{name}: greedy (reference.json):         {ours['greedy_ids']}")
        print(f"{name}: greedy (transformers generate):  {cached}")
        print(f"{name}: {'AGREE' if agree else 'DISAGREE'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
