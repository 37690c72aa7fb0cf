#!/usr/bin/env python3
"""Writes tests/data/tokenizers/, the reference cases prism's tokenizer, chat-template and
Jinja tests compare with, from Hugging Face's own libraries, offline:

  - llama3.json, llama3_1.json, qwen3.json, for the real tokenizers of
    tests/data/tokenizers/models/ (unpacked by tools/tokenizer_files.py): for every fixture
    string the ids without and with special tokens and the decoded text, with and without
    special tokens, from Hugging Face `tokenizers` on the tokenizer.json; and the chats of
    tools/tokenizer_fixture_inputs.py rendered by transformers' apply_chat_template, with and
    without the generation prompt;
  - handmade/NAME/: the small tokenizers of tools/handmade_tokenizers.py (tokenizer.json,
    tokenizer_config.json) with expected.json, their encodings and decodings made the same way;
  - jinja_cases.json: the templates of tools/jinja_fixture_templates.py rendered by Jinja2 in
    the environment transformers renders chat templates in.

Every encoding and decoding is also made by transformers' tokenizer class for the directory
(AutoTokenizer); where it disagrees with `tokenizers` the case is printed (the fixture follows
`tokenizers`). llama3_tokenizer_js_vectors.json (llama3-tokenizer-js's own test vectors, kept
as committed) is checked against `tokenizers` the same way.

  .venv/bin/python tools/make_tokenizer_fixtures.py [OUT_DIR] [--cache DIR]

OUT_DIR defaults to tests/data/tokenizers; --cache is where the tokenizer archives are unpacked
(see tools/tokenizer_files.py). The exit status is 1 when a cross-check found a disagreement.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import jinja2  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

import tokenizer_files  # noqa: E402
from handmade_tokenizers import HANDMADE_EXTRA_STRINGS, make_handmade_tokenizers  # noqa: E402
from jinja_fixture_templates import JINJA_CASES, render_jinja_case  # noqa: E402
from tokenizer_fixture_inputs import CONVERSATIONS, EDGE_STRINGS, FIXTURE_STRINGS  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source():
    """The "source" field of the fixtures: the libraries that made them."""
    return (
        f"tokenizers {tokenizers.__version__}, transformers {transformers.__version__}, "
        f"jinja2 {jinja2.__version__}"
    )


def indented_json(value):
    return json.dumps(value, indent=1, ensure_ascii=False)


def compact_json(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def show(text, limit=100):
    text = json.dumps(text, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Reference:
    """Hugging Face's answers for one tokenizer directory (tokenizer.json, tokenizer_config.json):
    encodings and decodings from `tokenizers`, chats from transformers' apply_chat_template.
    Disagreements of transformers' own encode/decode with `tokenizers` are collected."""

    def __init__(self, directory, label=None):
        self.label = label or os.path.basename(directory)
        self.tokenizer = tokenizers.Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
        self.transformers = AutoTokenizer.from_pretrained(directory)
        self.disagreements = []

    def _check(self, what, text, want, got):
        if want != got:
            self.disagreements.append(f"{self.label}: {what} {show(text)}: tokenizers {want}, transformers {got}")

    def encode_cases(self, strings):
        cases = []
        hf = self.transformers
        for text in strings:
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
            with_special = self.tokenizer.encode(text, add_special_tokens=True).ids
            decoded = self.tokenizer.decode(ids, skip_special_tokens=False)
            decoded_skip = self.tokenizer.decode(with_special, skip_special_tokens=True)
            self._check("encode", text, ids, hf.encode(text, add_special_tokens=False))
            self._check("encode with special tokens", text, with_special, hf.encode(text, add_special_tokens=True))
            self._check("decode", text, show(decoded), show(hf.decode(ids)))
            self._check(
                "decode skipping special tokens",
                text,
                show(decoded_skip),
                show(hf.decode(with_special, skip_special_tokens=True)),
            )
            cases.append(
                {
                    "text": text,
                    "ids": ids,
                    "ids_with_special": with_special,
                    "decoded": decoded,
                    "decoded_skip_special": decoded_skip,
                }
            )
        return cases

    def chats(self, conversations):
        chats = []
        for conversation in conversations:
            if "only" in conversation and self.label not in conversation["only"]:
                continue
            kwargs = conversation.get("kwargs", {})
            for add_generation_prompt in (False, True):
                rendered = self.transformers.apply_chat_template(
                    conversation["messages"],
                    tools=conversation.get("tools"),
                    tokenize=False,
                    add_generation_prompt=add_generation_prompt,
                    **kwargs,
                )
                chat = {"name": conversation["name"], "messages": conversation["messages"]}
                if "tools" in conversation:
                    chat["tools"] = conversation["tools"]
                chat.update(kwargs=kwargs, add_generation_prompt=add_generation_prompt, rendered=rendered)
                chats.append(chat)
        return chats

    def report(self):
        """Prints the disagreements; 1 if there are any."""
        for line in self.disagreements:
            print("disagreement:", line)
        return 1 if self.disagreements else 0


def check_llama3_tokenizer_js_vectors(path, llama3_1_dir):
    """Checks llama3-tokenizer-js's test vectors against `tokenizers` on the Llama 3.1 tokenizer,
    with Meta's names for the added tokens as the vectors have them (the packaged files keep Llama
    3's reserved names for a few). The vectors add BOS and EOS by options and decode without
    clean-up. Returns the disagreements."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    with open(os.path.join(llama3_1_dir, "tokenizer.json"), encoding="utf-8") as f:
        root = json.load(f)
    for token in root["added_tokens"]:
        token["content"] = data["special_tokens"][token["id"] - 128000]
    tokenizer = tokenizers.Tokenizer.from_str(json.dumps(root))
    disagreements = []
    for v in data["vectors"]:
        if v["kind"] == "encode":
            ids = tokenizer.encode(v["text"], add_special_tokens=False).ids
            ids = [data["bos_id"]] * v["bos"] + ids + [data["eos_id"]] * v["eos"]
            if ids != v["ids"]:
                disagreements.append(f"encode {show(v['text'])}: vectors {v['ids']}, tokenizers {ids}")
        else:
            text = tokenizer.decode(v["ids"], skip_special_tokens=False)
            if text != v["text"]:
                disagreements.append(f"decode {v['ids']}: vectors {show(v['text'])}, tokenizers {show(text)}")
    print(f"llama3_tokenizer_js_vectors.json: {len(data['vectors'])} vectors, {len(disagreements)} disagreements")
    for line in disagreements:
        print("disagreement: llama3-tokenizer-js", line)
    return len(disagreements)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", default=os.path.join(ROOT, "tests/data/tokenizers"))
    parser.add_argument("--cache", default=None, help="where the tokenizer archives are unpacked")
    args = parser.parse_args()
    out_dir = os.path.abspath(args.out_dir)
    os.makedirs(out_dir, exist_ok=True)
    print(source())
    failures = 0

    def write(path, text):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        print("wrote", os.path.relpath(path, ROOT))

    # The real tokenizers.
    dirs = {name: tokenizer_files.tokenizer_dir(name, args.cache) for name in tokenizer_files.NAMES}
    for name, directory in dirs.items():
        reference = Reference(directory, name)
        fixture = {
            "source": source(),
            "tokenizer": f"tests/data/tokenizers/models/{name}.tar.xz",
            "cases": reference.encode_cases(list(dict.fromkeys(FIXTURE_STRINGS + EDGE_STRINGS))),
            "chats": reference.chats(CONVERSATIONS),
        }
        write(os.path.join(out_dir, f"{name}.json"), indented_json(fixture))
        failures += reference.report()

    vectors = os.path.join(out_dir, "llama3_tokenizer_js_vectors.json")
    if not os.path.isfile(vectors):
        vectors = os.path.join(ROOT, "tests/data/tokenizers/llama3_tokenizer_js_vectors.json")
    failures += check_llama3_tokenizer_js_vectors(vectors, dirs["llama3_1"]) > 0

    # Hand-made tokenizers, trained on the fixture strings, checked on them and a few more.
    strings = list(dict.fromkeys(FIXTURE_STRINGS + HANDMADE_EXTRA_STRINGS + EDGE_STRINGS))
    for name, tokenizer_json in make_handmade_tokenizers(FIXTURE_STRINGS).items():
        directory = os.path.join(out_dir, "handmade", name)
        os.makedirs(directory, exist_ok=True)
        write(os.path.join(directory, "tokenizer.json"), compact_json(tokenizer_json))
        write(os.path.join(directory, "tokenizer_config.json"), compact_json({"clean_up_tokenization_spaces": False}))
        reference = Reference(directory)
        expected = {"source": source(), "cases": reference.encode_cases(strings)}
        write(os.path.join(directory, "expected.json"), compact_json(expected))
        failures += reference.report()

    # Jinja templates, rendered as transformers renders chat templates.
    cases = []
    for case in JINJA_CASES:
        rendered, disagreement = render_jinja_case(case)
        if disagreement:
            print("disagreement: jinja", disagreement)
            failures += 1
        cases.append(dict(case, rendered=rendered))
    write(os.path.join(out_dir, "jinja_cases.json"), indented_json({"source": source(), "cases": cases}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
