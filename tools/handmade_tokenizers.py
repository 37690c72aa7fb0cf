"""Small tokenizer.json files that exercise the parts of the format the real Llama/Qwen
tokenizers do not: byte fallback, Metaspace, NFKC/Lowercase/Strip, Bert-style normalization,
Digits/Whitespace pre-tokenizers, Split behaviors, and the WordPiece, Strip, Replace, Fuse and
ByteFallback decoders. Their BPE merges are learned here from a small corpus (the fixture
strings) so that encodings are non-trivial. tools/make_tokenizer_fixtures.py writes them to
tests/data/tokenizers/handmade/ with Hugging Face's encodings of many strings.

The corpus is cut into words the way the first version of this generator did (it was
JavaScript): "whitespace" is ECMAScript's (U+FEFF included, U+001C-U+001F and U+0085 not), `\\w`
is ASCII, and ties between pairs and the order of characters go by UTF-16 code units. That
keeps the learned merges, and so the committed tokenizer files, as they are; the files are
only training output, and any merges would do.
"""
import unicodedata

import regex

# ECMAScript's WhiteSpace and LineTerminator characters, as the contents of a character class.
_JS_SPACE = r"\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
# JavaScript's meaning of the class escapes (in a pattern with the u flag and no i flag).
_JS_CLASSES = {"s": _JS_SPACE, "w": "A-Za-z0-9_", "d": "0-9"}


def js_regex(pattern):
    """Compiles a JavaScript regular expression (u flag) with the `regex` module, giving `\\s`,
    `\\w`, `\\d` and their negations JavaScript's meaning. `\\p{...}` is the same in both."""
    out, in_class, i = [], False, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            escape = pattern[i + 1]
            if escape.lower() in _JS_CLASSES:
                chars = _JS_CLASSES[escape.lower()]
                if in_class:
                    if escape.isupper():
                        raise ValueError(f"js_regex: \\{escape} inside a class: {pattern}")
                    out.append(chars)
                else:
                    out.append(f"[^{chars}]" if escape.isupper() else f"[{chars}]")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return regex.compile("".join(out))


def _utf16_order(text):
    """A sort key that orders strings by UTF-16 code units."""
    return text.encode("utf-16-be")


def _js_trim(text):
    return js_regex(r"^\s+|\s+$").sub("", text)


def _split_before(text, lookahead):
    """JavaScript's text.split(/(?=...)/u): cuts before each position where `lookahead` matches,
    with no empty first piece."""
    pieces = js_regex(lookahead).split(text)
    return pieces[1:] if len(pieces) > 1 and pieces[0] == "" else pieces


def _bytes_to_unicode():
    """GPT-2's byte-level alphabet: printable bytes stand for themselves, the others for
    U+0100 and on, in byte order."""
    def printable(b):
        return 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF

    table, extra = [], 0
    for b in range(256):
        if printable(b):
            table.append(chr(b))
        else:
            table.append(chr(256 + extra))
            extra += 1
    return table


BYTE_LEVEL_CHARS = _bytes_to_unicode()


def byte_level(text):
    return "".join(BYTE_LEVEL_CHARS[b] for b in text.encode("utf-8"))


def learn_merges(words, count):
    """Learns up to `count` BPE merges over words given as sequences of symbols: each step
    merges the most frequent adjacent pair (seen at least twice; ties to the smallest pair),
    left to right in every word. Returns the merges in order, as [a, b] lists."""
    # Equal words merge alike, so each distinct word is kept once with its number.
    counts = {}
    for w in words:
        key = tuple(w)
        counts[key] = counts.get(key, 0) + 1
    vocab = [[list(w), n] for w, n in counts.items()]
    merges = []
    for _ in range(count):
        pairs = {}
        for w, n in vocab:
            for i in range(len(w) - 1):
                pair = (w[i], w[i + 1])
                pairs[pair] = pairs.get(pair, 0) + n
        best, best_count = None, 1
        for pair, n in pairs.items():
            key = _utf16_order(pair[0] + "\0" + pair[1])
            if n > best_count or (n == best_count and best is not None and key < best[0]):
                best, best_count = (key, pair), n
        if best is None:
            break
        a, b = best[1]
        merges.append([a, b])
        for entry in vocab:
            w = entry[0]
            i = 0
            while i + 1 < len(w):
                if w[i] == a and w[i + 1] == b:
                    w[i : i + 2] = [a + b]
                i += 1
    return merges


def _vocab_from(specials, symbols, merges):
    vocab = {}
    for s in list(specials) + list(symbols):
        vocab.setdefault(s, len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab


def _frequent_chars(texts, min_count):
    counts = {}
    for t in texts:
        for c in t:
            counts[c] = counts.get(c, 0) + 1
    return sorted((c for c, n in counts.items() if n >= min_count), key=_utf16_order)


def added_token(id, content, **options):
    token = {
        "id": id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }
    token.update(options)
    return token


def _tokenizer_json(model, added_tokens, normalizer=None, pre_tokenizer=None, post_processor=None, decoder=None):
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post_processor,
        "decoder": decoder,
        "model": model,
    }


def bpe_model(vocab, merges, **options):
    model = {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
        "vocab": vocab,
        "merges": merges,
    }
    model.update(options)
    return model


def make_handmade_tokenizers(corpus):
    """{name: tokenizer.json object}, built from `corpus` (a list of strings)."""
    tokenizers = {}
    lines = [t for t in corpus if t]

    # 1. SentencePiece-style BPE with byte fallback (the Llama 2 / Mistral layout).
    def sp_normalize(t):
        return "\u2581" + t.replace(" ", "\u2581")

    words = [list(w) for t in lines for w in _split_before(sp_normalize(t), "(?=\u2581)")]
    merges = learn_merges(words, 300)
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    vocab = _vocab_from(
        ["<unk>", "<s>", "</s>"] + byte_tokens, _frequent_chars([sp_normalize(t) for t in lines], 3), merges
    )
    extra = len(vocab)
    tokenizers["sentencepiece_byte_fallback"] = _tokenizer_json(
        normalizer={
            "type": "Sequence",
            "normalizers": [
                {"type": "Prepend", "prepend": "\u2581"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
            ],
        },
        post_processor={
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
        },
        decoder={
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ],
        },
        model=bpe_model(vocab, [f"{a} {b}" for a, b in merges], unk_token="<unk>", byte_fallback=True, fuse_unk=True),
        added_tokens=[
            added_token(0, "<unk>"),
            added_token(1, "<s>"),
            added_token(2, "</s>"),
            added_token(extra, "[MASK]", lstrip=True, rstrip=True),
            added_token(extra + 1, "<sep>", special=False),
        ],
    )

    # 2. Metaspace with NFKC + Lowercase + Strip, digits split off.
    def nfkc_lower_strip(t):
        return _js_trim(unicodedata.normalize("NFKC", t).lower())

    words = [
        list(js_regex(r"\s").sub("\u2581", w)) for t in lines for w in _split_before(nfkc_lower_strip(t), r"(?=\s)")
    ]
    merges = learn_merges(words, 250)
    vocab = _vocab_from(
        ["<unk>", "<mask>"], ["\u2581"] + _frequent_chars([nfkc_lower_strip(t) for t in lines], 2), merges
    )
    tokenizers["metaspace_nfkc"] = _tokenizer_json(
        normalizer={
            "type": "Sequence",
            "normalizers": [
                {"type": "NFKC"},
                {"type": "Lowercase"},
                {"type": "Strip", "strip_left": True, "strip_right": True},
            ],
        },
        pre_tokenizer={
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
            ],
        },
        decoder={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        model=bpe_model(vocab, merges, unk_token="<unk>"),
        added_tokens=[added_token(0, "<unk>"), added_token(1, "<mask>", lstrip=True)],
    )

    # 3. Bert-style normalization and pre-tokenization, WordPiece decoding, [CLS] A [SEP].
    def bert_words(t):
        folded = unicodedata.normalize("NFD", t.lower())
        folded = "".join(c for c in folded if unicodedata.category(c) != "Mn")
        return [w for w in js_regex(r"[\s\p{P}]+").split(folded) if w]

    words = [w for t in lines for w in bert_words(t)]
    merges = learn_merges(words, 250)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = _vocab_from(specials, _frequent_chars(words, 2), merges)
    tokenizers["bert_like"] = _tokenizer_json(
        normalizer={
            "type": "BertNormalizer",
            "clean_text": True,
            "handle_chinese_chars": True,
            "strip_accents": None,
            "lowercase": True,
        },
        pre_tokenizer={"type": "BertPreTokenizer"},
        post_processor={"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
        decoder={"type": "WordPiece", "prefix": "##", "cleanup": True},
        model=bpe_model(vocab, merges, unk_token="[UNK]"),
        added_tokens=[added_token(i, t) for i, t in enumerate(specials)],
    )

    # 4. Byte-level BPE with a prefix space and GPT-2's regex (RoBERTa layout), NFD + accents off.
    gpt2_words = js_regex(r" ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+")
    byte_words = [list(byte_level(w)) for t in lines for w in gpt2_words.findall(" " + t)]
    byte_merges = learn_merges(byte_words, 300)
    byte_vocab = _vocab_from(["<s>", "<pad>", "</s>", "<unk>"], BYTE_LEVEL_CHARS, byte_merges)
    byte_extra = len(byte_vocab)
    tokenizers["byte_level_roberta"] = _tokenizer_json(
        normalizer={
            "type": "Sequence",
            "normalizers": [
                {"type": "NFD"},
                {"type": "StripAccents"},
                {"type": "Replace", "pattern": {"Regex": "\\s*\\n\\s*"}, "content": "\n"},
            ],
        },
        pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        post_processor={
            "type": "RobertaProcessing",
            "sep": ["</s>", 2],
            "cls": ["<s>", 0],
            "trim_offsets": True,
            "add_prefix_space": True,
        },
        decoder={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        model=bpe_model(byte_vocab, byte_merges),
        added_tokens=[
            added_token(0, "<s>"),
            added_token(1, "<pad>"),
            added_token(2, "</s>"),
            added_token(3, "<unk>"),
            added_token(byte_extra, "<mask>", lstrip=True),
        ],
    )

    # 5. Split, removing or isolating the matches, then byte-level without a regex.
    for name, behavior in (("split_removed", "Removed"), ("split_isolated", "Isolated")):
        tokenizers[name] = _tokenizer_json(
            pre_tokenizer={
                "type": "Sequence",
                "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": "[,;:]|\\d|\\s+"}, "behavior": behavior, "invert": False},
                    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
                ],
            },
            decoder={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            model=bpe_model(byte_vocab, byte_merges, ignore_merges=True),
            added_tokens=[added_token(0, "<s>"), added_token(2, "</s>")],
        )

    # 6. Whitespace pre-tokenizer, a regex Replace normalizer, and Replace + Strip decoders.
    ascii_words = js_regex(r"\w+|[^\w\s]+")
    words = [w for t in lines for w in ascii_words.findall(t)]
    merges = learn_merges(words, 200)
    vocab = _vocab_from(["<unk>"], _frequent_chars(words, 1), merges)
    tokenizers["whitespace_replace"] = _tokenizer_json(
        normalizer={"type": "Replace", "pattern": {"Regex": "[0-9]+"}, "content": "#"},
        pre_tokenizer={"type": "Whitespace"},
        decoder={
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "#"}, "content": "<num>"},
                {"type": "Strip", "content": "<", "start": 1, "stop": 0},
            ],
        },
        model=bpe_model(vocab, merges, unk_token="<unk>"),
        added_tokens=[added_token(0, "<unk>")],
    )
    return tokenizers


# Strings for the hand-made tokenizers beside the fixture strings: added tokens, case, width
# and the separators of the Split tokenizers.
HANDMADE_EXTRA_STRINGS = [
    "a [MASK] b",
    "a   [MASK]   b",
    "[MASK]",
    "x<sep>y",
    " <sep> ",
    "hello <mask> world",
    "hello<mask>world",
    "<mask>",
    "<s>hi</s>",
    "x <unk> y",
    "[CLS] a [SEP]",
    "UPPER lower MiXeD",
    "Ｆｕｌｌ ｗｉｄｔｈ ①②",
    "ﬁne ﬂow",
    "a,b;c:d 1 2 3",
    ",,;;",
    "12,34;56",
    "no separators here",
]
