#!/usr/bin/env python3
"""Writes tests/data/lfm2/tokenizer/: a small tokenizer of LFM 2's kind, and what Hugging Face
makes of it.

The published LFM2 / LFM2.5 tokenizer cannot be had offline; this one has the same shape: a
byte-level BPE tokenizer.json (a Split pre-tokenizer, then byte-level symbols), LFM's special
tokens at their ids (<|pad|> 0, <|startoftext|> 1, <|endoftext|> 2, the fill-in-the-middle
markers 3-5, <|im_start|> 6, <|im_end|> 7, the tool markers 8-13), and a ChatML-style chat
template of our own that opens with the bos token, puts the system prompt and an optional JSON
tool list (between <|tool_list_start|> and <|tool_list_end|>) first, wraps tool results in
<|tool_response_start|> / <|tool_response_end|>, and ends each turn with <|im_end|>. Its merges
are learned here from the tokenizer fixture strings, so the vocabulary (under 1000 ids) fits the
tiny checkpoints' 65536 rows.

expected.json holds the reference prism's tests compare with: the encodings (with and without
special tokens) and decodings of Hugging Face `tokenizers`, and the chats rendered by
transformers' apply_chat_template (Jinja2), all offline.

  .venv/bin/python tools/make_lfm2_tokenizer.py [OUT_DIR]   # default tests/data/lfm2/tokenizer
"""
import json
import os
import sys

import make_tokenizer_fixtures as fixtures
from handmade_tokenizers import BYTE_LEVEL_CHARS, added_token, bpe_model, byte_level, js_regex, learn_merges
from tokenizer_fixture_inputs import CONVERSATIONS, EDGE_STRINGS, FIXTURE_STRINGS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPECIAL_TOKENS = [
    "<|pad|>",
    "<|startoftext|>",
    "<|endoftext|>",
    "<|fim_pre|>",
    "<|fim_mid|>",
    "<|fim_suf|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|tool_list_start|>",
    "<|tool_list_end|>",
    "<|tool_call_start|>",
    "<|tool_call_end|>",
    "<|tool_response_start|>",
    "<|tool_response_end|>",
]
# Letters, numbers of up to three digits, other symbols, line breaks and spaces, with the
# contractions apart (the pattern of the Llama 3 family's byte-level tokenizers).
SPLIT_PATTERN = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)
MERGES = 2000

CHAT_TEMPLATE = "\n".join(
    [
        "{{- bos_token -}}",
        '{%- set ns = namespace(system="") -%}',
        '{%- if messages and messages[0]["role"] == "system" -%}',
        '{%- set ns.system = messages[0]["content"] -%}',
        "{%- endif -%}",
        "{%- if tools -%}",
        '{%- set tool_list = "List of tools: <|tool_list_start|>" + (tools | tojson) + "<|tool_list_end|>" -%}',
        '{%- set ns.system = (ns.system + "\\n" + tool_list) if ns.system else tool_list -%}',
        "{%- endif -%}",
        "{%- if ns.system -%}",
        '{{- "<|im_start|>system\\n" + ns.system + "<|im_end|>\\n" -}}',
        "{%- endif -%}",
        "{%- for message in messages -%}",
        '{%- if not (loop.first and message["role"] == "system") -%}',
        '{%- set content = message["content"] if message["content"] is string else "" -%}',
        '{%- if message["role"] == "tool" -%}',
        '{%- set content = "<|tool_response_start|>" + content + "<|tool_response_end|>" -%}',
        "{%- endif -%}",
        '{{- "<|im_start|>" + message["role"] + "\\n" + content + "<|im_end|>\\n" -}}',
        "{%- endif -%}",
        "{%- endfor -%}",
        "{%- if add_generation_prompt -%}",
        '{{- "<|im_start|>assistant\\n" -}}',
        "{%- endif -%}",
    ]
)

# Conversations of LFM's kind beside the shared ones (those meant for other templates left out).
LFM_CONVERSATIONS = [c for c in CONVERSATIONS if "only" not in c] + [
    {
        "name": "tools",
        "messages": [
            {"role": "system", "content": "You can look things up."},
            {"role": "user", "content": "What is the status of candidate 12345?"},
            {"role": "assistant", "content": '<|tool_call_start|>[get_status(id="12345")]<|tool_call_end|>Checking.'},
            {"role": "tool", "content": '{"id": "12345", "status": "interview"}'},
            {"role": "assistant", "content": "An interview is scheduled."},
        ],
        "tools": [
            {
                "name": "get_status",
                "description": "Status of a candidate",
                "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
            }
        ],
    },
]


def make_tokenizer():
    # Words for the merges: the pattern's matches, case-sensitive (as the files were first made).
    words_re = js_regex(SPLIT_PATTERN.replace("(?i:", "(?:"))
    words = [byte_level(w) for t in FIXTURE_STRINGS for w in words_re.findall(t)]
    merges = learn_merges(words, MERGES)
    vocab = {}
    for s in SPECIAL_TOKENS + BYTE_LEVEL_CHARS:
        vocab[s] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    bos = SPECIAL_TOKENS[1]
    added = [added_token(i, content) for i, content in enumerate(SPECIAL_TOKENS)]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": SPLIT_PATTERN}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {bos: {"id": bos, "ids": [1], "tokens": [bos]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": bpe_model(vocab, [f"{a} {b}" for a, b in merges]),
    }


def tokenizer_config():
    decoder = {
        str(i): {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i, content in enumerate(SPECIAL_TOKENS)
    }
    return {
        "added_tokens_decoder": decoder,
        "bos_token": "<|startoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|pad|>",
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 128000,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def main():
    out_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/data/lfm2/tokenizer"))
    os.makedirs(out_dir, exist_ok=True)
    tokenizer = make_tokenizer()
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(fixtures.compact_json(tokenizer) + "\n")
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(tokenizer_config(), indent=2, ensure_ascii=False) + "\n")

    reference = fixtures.Reference(out_dir)
    expected = {
        "source": fixtures.source(),
        "cases": reference.encode_cases(list(dict.fromkeys(FIXTURE_STRINGS + EDGE_STRINGS))),
        "chats": reference.chats(LFM_CONVERSATIONS),
    }
    with open(os.path.join(out_dir, "expected.json"), "w", encoding="utf-8") as f:
        f.write(fixtures.compact_json(expected) + "\n")
    print(f"wrote {os.path.relpath(out_dir, ROOT)}/: {len(tokenizer['model']['vocab'])} tokens")
    return reference.report()


if __name__ == "__main__":
    sys.exit(main())
