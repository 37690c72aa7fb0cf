"""prism.llm: language models (Llama 3.x, Qwen 3.5, LFM 2, from safetensors checkpoints or GGUF
files) with prism's engine, as `prism llm` runs them (docs/llm.md, docs/python.md)."""
import json as _json

from prism import _prism
from prism._prism import Error
from prism.tokenizer import Tokenizer


class Model:
    """A loaded model. `Model.load(uri, platform=..., dtype=...)`: uri is a checkpoint directory
    (config.json, safetensors, tokenizer files) or a GGUF file; local, https://, hf:// or s3://.
    platform: "cpu", "opencl", "cuda", "xla-cpu", ... (default: PRISM_PLATFORM, else the best
    one here); dtype: "auto" (the checkpoint's own), "f32" or "bf16"; seqlen: the longest
    conversation; draft_head: load the checkpoint's multi-token prediction head (Qwen 3.5's),
    for speculate="mtp". Each generation starts a fresh conversation."""

    def __init__(self, native):
        self._native = native
        self.tokenizer = Tokenizer(native.tokenizer) if native.has_tokenizer else None

    @staticmethod
    def load(uri, platform=None, dtype="auto", seqlen=4096, draft_head=False):
        return Model(_prism.Model(str(uri), platform or "", dtype, seqlen, bool(draft_head)))

    @property
    def seqlen(self):
        return self._native.seqlen

    @property
    def eos_token_ids(self):
        return list(self._native.eos_token_ids)

    def _start(self, prompt, ids, max_tokens, temperature, top_p, top_k, min_p,
               repetition_penalty, frequency_penalty, presence_penalty, seed, stop, speculate,
               draft_model, draft_tokens, json=False, json_schema=None):
        if (prompt is None) == (ids is None):
            raise ValueError("prism.llm: give a prompt or ids, not both or neither")
        if ids is None:
            if self.tokenizer is None:
                raise Error("prism.llm: this model has no tokenizer: give ids")
            ids = self.tokenizer.encode(prompt, add_special_tokens=True)
        if isinstance(stop, str):
            stop = [stop]
        if json_schema is not None and not isinstance(json_schema, str):
            json_schema = _json.dumps(json_schema)
        return _prism.Model._generate(self._native, list(ids), float(temperature), int(top_k),
                                      float(top_p), float(min_p), float(repetition_penalty),
                                      float(frequency_penalty), float(presence_penalty),
                                      int(seed), int(max_tokens), list(stop or []),
                                      str(speculate),
                                      draft_model._native if draft_model is not None else None,
                                      int(draft_tokens), bool(json), json_schema or "")

    def generate_ids(self, prompt=None, ids=None, max_tokens=256, temperature=0.0, top_p=1.0,
                     top_k=0, min_p=0.0, repetition_penalty=1.0, seed=0, stop=None,
                     speculate="none", draft_model=None, draft_tokens=4, frequency_penalty=0.0,
                     presence_penalty=0.0, json=False, json_schema=None):
        """The generated ids after `prompt` (text, BOS added as the tokenizer says) or `ids` (as
        they are), as `prism llm --print-ids` prints them: greedy by default (temperature 0),
        up to max_tokens, ending before an end-of-sequence id. speculate="lookup", "draft"
        (with draft_model, another Model sharing the tokenizer) or "mtp" (the model's own
        multi-token prediction head: load it with draft_head=True) guesses up to draft_tokens
        tokens a step and checks them in one (docs/speculative.md): the same greedy ids, the
        same distribution when sampling. repetition_penalty is Hugging Face's (each distinct
        token of the prompt and answer), frequency_penalty and presence_penalty OpenAI's (-2 to
        2, the answer's tokens alone), as `prism llm` takes them. json=True holds the answer to a
        JSON object, json_schema (a dict, or its JSON text) to a value of that JSON Schema,
        token by token, as `prism serve`'s response_format does (docs/serving.md)."""
        run = self._start(prompt, ids, max_tokens, temperature, top_p, top_k, min_p,
                          repetition_penalty, frequency_penalty, presence_penalty, seed, stop,
                          speculate, draft_model, draft_tokens, json, json_schema)
        out = []
        while (step := run.next()) is not None:
            if step[0] is not None:
                out.append(step[0])
        return out

    def generate(self, prompt=None, ids=None, max_tokens=256, temperature=0.0, top_p=1.0,
                 top_k=0, min_p=0.0, repetition_penalty=1.0, seed=0, stop=None, stream=False,
                 speculate="none", draft_model=None, draft_tokens=4, frequency_penalty=0.0,
                 presence_penalty=0.0, json=False, json_schema=None):
        """The text generated after `prompt` or `ids` (see generate_ids), ending before a stop
        string. stream=True returns an iterator of text pieces instead, each a whole number
        of characters, as they are generated."""
        if self.tokenizer is None:
            raise Error("prism.llm: this model has no tokenizer: use generate_ids")
        run = self._start(prompt, ids, max_tokens, temperature, top_p, top_k, min_p,
                          repetition_penalty, frequency_penalty, presence_penalty, seed, stop,
                          speculate, draft_model, draft_tokens, json, json_schema)
        pieces = _pieces(run, [stop] if isinstance(stop, str) else list(stop or []))
        return pieces if stream else "".join(pieces)

    def chat(self, messages, stream=False, **sampling):
        """The assistant's reply to `messages` (a list of {"role", "content"} dicts), through
        the model's chat template; sampling options as for generate()."""
        if self.tokenizer is None or not self.tokenizer.has_chat_template:
            raise Error("prism.llm: this model has no chat template")
        prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        ids = self.tokenizer.encode(prompt)
        return self.generate(ids=ids, stream=stream, **sampling)


def _pieces(run, stops):
    """The text pieces of a generation, ending before the first stop string: text that could be
    the start of one is held back until it is known not to be."""
    stops = [s for s in stops if s]
    hold = max((len(s) for s in stops), default=1) - 1
    text, sent = "", 0
    while (step := run.next()) is not None:
        text += step[1]
        if run.stopped:
            cut = min(i for i in (text.find(s) for s in stops) if i >= 0)
            if cut > sent:
                yield text[sent:cut]
            return
        if len(text) - hold > sent:
            yield text[sent:len(text) - hold]
            sent = len(text) - hold
    if len(text) > sent:
        yield text[sent:]
