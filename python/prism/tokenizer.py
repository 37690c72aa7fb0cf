"""prism.Tokenizer: Hugging Face tokenizer.json files and GGUF files' tokenizers, with their
chat templates, exactly as prism reads them (docs/tokenizers.md)."""
import json

from prism import _prism


class Tokenizer:
    """A tokenizer: `Tokenizer.load(uri)` for a directory with tokenizer.json (and
    tokenizer_config.json for the chat template), a tokenizer.json file, or a GGUF file; local,
    https://, hf:// or s3://."""

    def __init__(self, native):
        self._native = native

    @staticmethod
    def load(uri):
        return Tokenizer(_prism.Tokenizer.load(str(uri)))

    def encode(self, text, add_special_tokens=False):
        """The ids of `text`; special-token strings in it become their ids. add_special_tokens
        runs the post-processor (Llama's BOS)."""
        return self._native.encode(text, add_special_tokens)

    def decode(self, ids, skip_special_tokens=False):
        return self._native.decode(list(ids), skip_special_tokens)

    @property
    def vocab_size(self):
        return self._native.vocab_size

    def id_to_token(self, id):
        return self._native.id_to_token(id)

    def is_special(self, id):
        return self._native.is_special(id)

    @property
    def has_chat_template(self):
        return self._native.has_chat_template

    def apply_chat_template(self, messages, add_generation_prompt=False, **kwargs):
        """transformers' apply_chat_template(tokenize=False): the prompt text for `messages` (a
        list of {"role", "content"} dicts); keyword arguments are template variables."""
        return self._native._apply_chat_template(json.dumps(messages), add_generation_prompt,
                                                 json.dumps(kwargs))
