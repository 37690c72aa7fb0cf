"""Writes tests/data/gguf/spm_tokenizer.gguf and spm_tokenizer_ref.json: a SentencePiece tokenizer
as a GGUF file holds it (tokenizer.ggml.model "llama": Llama 2, Mistral, TinyLlama, ...), and the
ids and text Google's `sentencepiece` library gives for a set of inputs. prism's GGUF tokenizer
(prism/llm/tokenizer_gguf.cpp) must give the same (tests/unit/gguf_spm_tokenizer_test.cpp).

The tokenizer is trained here by `sentencepiece` itself, on a small built-in corpus: a BPE model
with Llama 2's settings (byte fallback, digits split, no normalization, a dummy prefix, extra
whitespace kept), a vocabulary of 700 pieces, and a character coverage below 1 so that rare
characters fall back to bytes. The GGUF file is written by the `gguf` package (llama.cpp's own)
with the arrays llama.cpp's converter writes for such a model: tokens, scores and token types
(normal, unknown, control, unused, byte), the special ids, add_bos_token and add_space_prefix.

Run: .venv/bin/python tools/make_spm_gguf_fixture.py   (needs scripts/setup.sh --tools)
"""
import json
import os
import sys
import tempfile

# tools/gguf.py (the benches' minimal writer) would shadow the package of the same name: import
# the package with this script's folder out of the path.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import gguf  # noqa: E402
import sentencepiece as spm  # noqa: E402

OUT_DIR = os.path.join(HERE, "..", "tests", "data", "gguf")

WORDS = (
    "the of and to in is was for on that with as by at from it his an were are which this be or "
    "has had not but first one their its new after who they have her she two been other when "
    "there all during into school time may years more most only over city some world would where "
    "later up such used many can state about national out known university united then made "
    "model token tokenizer weights layer attention decode prefill batch device memory cache "
    "sentence piece merge score byte fallback vocabulary language inference server stream"
).split()
EXTRA = [
    "Hello, world!", "It's 2024: 3.14159 + 1234567 = ?", "naïve café", "Ünïcödé", "日本語のテキスト",
    "Ελληνικά", "русский язык", "don't", "we'll", "they'd've", "(x + y) * z", "a_b-c.d/e",
    "New York", "São Paulo", "Zürich", "e-mail: someone@example.com",
]


def corpus():
    """Deterministic sentences: words in a fixed pseudo-random order, plus the extra phrases."""
    state = 12345
    lines = []
    for i in range(3000):
        words = []
        for _ in range(5 + i % 11):
            state = (state * 1103515245 + 12345) % (1 << 31)
            words.append(WORDS[state % len(WORDS)])
        if i % 7 == 0:
            words.append(EXTRA[i // 7 % len(EXTRA)])
        if i % 5 == 0:
            words[0] = words[0].capitalize()
        lines.append(" ".join(words) + ("." if i % 3 else "?"))
    return lines


# Inputs for the test: spaces and whitespace of every kind, digits, punctuation, text outside
# the vocabulary (byte fallback), and what looks like a control token (plain text to the model).
INPUTS = [
    "The first model of the world",
    "Hello, world! It's 2024: 3.14159 + 1234567 = ?",
    " leading space",
    "  two leading spaces and trailing  ",
    "multiple   spaces\tand\ttabs\nnew lines\n\nand\r\nCRLF",
    "naïve café, Ünïcödé, 日本語のテキスト, Ελληνικά, русский",
    "emoji 😀👍🏽 and 🇫🇷 flags",
    "tokenizer vocabulary byte fallback: ȸȹȺ ⅧⅨ ∮∯",
    "a",
    "",
    " ",
    "\n",
    "digits 0 1 22 333 4444 55555",
    "words that are not in the corpus: xylophone quizzically jukebox",
]
# Texts around control tokens: a GGUF tokenizer (llama.cpp's, Hugging Face's) matches "<s>" and
# "</s>" in the text as their ids and encodes each piece of text between them on its own, with
# its own dummy prefix; the expected ids are sentencepiece's for the pieces, joined.
SPECIAL = [
    ["<s>", "Hello there", "</s>", " and more"],
    ["a", "</s>", "", "<s>", "b c"],
]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "corpus.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n".join(corpus()) + "\n")
        prefix = os.path.join(tmp, "spm")
        spm.SentencePieceTrainer.train(
            input=text, model_prefix=prefix, model_type="bpe", vocab_size=700,
            character_coverage=0.995, byte_fallback=True, split_digits=True,
            normalization_rule_name="identity", remove_extra_whitespaces=False,
            add_dummy_prefix=True, allow_whitespace_only_pieces=True, num_threads=1,
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")

    # As llama.cpp's converter (_create_vocab_sentencepiece) writes them.
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i).encode("utf-8"))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(gguf.TokenType.UNKNOWN)
        elif sp.is_control(i):
            types.append(gguf.TokenType.CONTROL)
        elif sp.is_unused(i):
            types.append(gguf.TokenType.UNUSED)
        elif sp.is_byte(i):
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)

    path = os.path.join(OUT_DIR, "spm_tokenizer.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    ref = [{"text": t, "ids": sp.encode(t), "decoded": sp.decode(sp.encode(t))} for t in INPUTS]
    control = {"<s>": sp.bos_id(), "</s>": sp.eos_id()}
    for parts in SPECIAL:
        ids = []
        for part in parts:
            ids += [control[part]] if part in control else sp.encode(part)
        ref.append({"text": "".join(parts), "ids": ids})
    head = {"vocab_size": sp.get_piece_size(), "bos": sp.bos_id(), "eos": sp.eos_id(),
            "unk": sp.unk_id()}
    with open(os.path.join(OUT_DIR, "spm_tokenizer_ref.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "inputs": [\n')
        f.write(",\n".join(json.dumps(r, ensure_ascii=False) for r in ref))
        f.write("\n]}\n")
    print(f"wrote {path} ({sp.get_piece_size()} pieces) and its references")


if __name__ == "__main__":
    main()
