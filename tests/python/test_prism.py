"""The Python package (python/prism) against the `prism` command: the same tokenizer ids, chat
prompts and greedy ids for the tiny checkpoints, streaming equal to the whole text, and bad input
raising prism.Error with prism's one-line message. Run by ctest (`python`) with PYTHONPATH at
the build tree's package and PRISM_CLI, PRISM_SOURCE_DIR, PRISM_TOKENIZERS_DIR and
PRISM_GGUF_DIR set."""
import json
import os
import subprocess

import pytest

import prism

CLI = os.environ["PRISM_CLI"]
SOURCE = os.environ["PRISM_SOURCE_DIR"]
TOKENIZERS = os.environ["PRISM_TOKENIZERS_DIR"]
GGUF = os.environ["PRISM_GGUF_DIR"]
TINY = os.path.join(SOURCE, "tests", "data", "llama", "tiny-f32")
PROMPT_IDS = [128000, 791, 6864, 315, 9822, 374]


def cli(*args):
    return subprocess.run([CLI, *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def tiny_with_tokenizer(tmp_path_factory):
    """The tiny Llama checkpoint beside the Llama 3.1 tokenizer files (as tests/cli/ do)."""
    d = tmp_path_factory.mktemp("tiny")
    for f in os.listdir(TINY):
        os.symlink(os.path.join(TINY, f), d / f)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        os.symlink(os.path.join(TOKENIZERS, "llama3_1", f), d / f)
    return str(d)


def test_platforms():
    names = {p["name"]: p for p in prism.platforms()}
    assert names["cpu"]["available"]
    assert names["cpu"]["devices"][0]["memory_bytes"] > 0
    assert all(p["available"] for p in prism.platforms(available_only=True))
    assert prism.info().startswith(f"prism {prism.__version__}\n")
    assert "  cpu      available" in prism.info()


@pytest.mark.parametrize("name", ["llama3_1", "qwen3"])
def test_tokenizer_as_the_cli(name):
    path = os.path.join(TOKENIZERS, name)
    tok = prism.Tokenizer.load(path)
    text = "Hello, world! naïve café 日本語 <|im_start|>x"
    ids = tok.encode(text, add_special_tokens=True)
    assert ids == [int(i) for i in cli("tokenize", f"--tokenizer={path}", "--special", text).split()]
    assert tok.decode(ids) == cli("detokenize", f"--tokenizer={path}", *map(str, ids))
    assert tok.decode(ids, skip_special_tokens=True) == cli(
        "detokenize", f"--tokenizer={path}", "--skip-special", *map(str, ids))
    assert tok.vocab_size > 100000


def test_chat_template_as_the_cli(tmp_path):
    path = os.path.join(TOKENIZERS, "qwen3")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    (tmp_path / "m.json").write_text(json.dumps(messages))
    want = cli("chat-template", f"--tokenizer={path}", f"--messages={tmp_path / 'm.json'}",
               "--add-generation-prompt", '--kwargs={"enable_thinking": false}')
    tok = prism.Tokenizer.load(path)
    assert tok.has_chat_template
    assert tok.apply_chat_template(messages, add_generation_prompt=True,
                                   enable_thinking=False) == want


@pytest.mark.parametrize("model", [TINY, os.path.join(GGUF, "tiny-f32.gguf")])
def test_greedy_ids_as_the_cli(model):
    want = cli("llm", f"--model={model}", "--prompt-ids=" + ",".join(map(str, PROMPT_IDS)),
               "--max-tokens=24", "--print-ids", "--seqlen=64", "--dtype=f32")
    m = prism.llm.Model.load(model, platform="cpu", dtype="f32", seqlen=64)
    got = m.generate_ids(ids=PROMPT_IDS, max_tokens=24)
    assert got == [int(i) for i in want.split()]
    assert len(got) == 24
    # Each generation starts afresh: the same again.
    assert m.generate_ids(ids=PROMPT_IDS, max_tokens=24) == got


def test_chat_as_the_cli(tiny_with_tokenizer):
    want = cli("llm", f"--model={tiny_with_tokenizer}", "--prompt=What is the capital of France?",
               "--max-tokens=16", "--seqlen=128", "--dtype=f32")
    m = prism.llm.Model.load(tiny_with_tokenizer, dtype="f32", seqlen=128)
    reply = m.chat([{"role": "user", "content": "What is the capital of France?"}],
                   max_tokens=16)
    assert reply + "\n" == want
    # Streamed: the same text, in pieces.
    pieces = list(m.chat([{"role": "user", "content": "What is the capital of France?"}],
                         max_tokens=16, stream=True))
    assert "".join(pieces) == reply
    assert len(pieces) > 1


def test_stop_strings(tiny_with_tokenizer):
    m = prism.llm.Model.load(tiny_with_tokenizer, dtype="f32", seqlen=128)
    whole = m.generate("The capital of France is", max_tokens=20)
    assert len(whole) > 8
    stop = whole[5:8]
    want = whole[:whole.find(stop)]
    assert m.generate("The capital of France is", max_tokens=20, stop=stop) == want
    assert "".join(m.generate("The capital of France is", max_tokens=20, stop=[stop, "\x00"],
                              stream=True)) == want


def test_speculative_decoding_gives_the_same_ids():
    m = prism.llm.Model.load(TINY, dtype="f32", seqlen=64)
    want = m.generate_ids(ids=PROMPT_IDS, max_tokens=24)
    assert m.generate_ids(ids=PROMPT_IDS, max_tokens=24, speculate="lookup",
                          draft_tokens=3) == want
    # A draft model: the same checkpoint loaded again guesses every token right.
    draft = prism.llm.Model.load(TINY, dtype="f32", seqlen=64)
    run = m._start(None, PROMPT_IDS, 24, 0.0, 1.0, 0, 0.0, 1.0, 0.0, 0.0, 0, None, "draft", draft,
                   4)
    got = []
    while (step := run.next()) is not None:
        got.append(step[0])
    assert got == want
    guessed, kept = run.guesses
    assert guessed > 0 and kept == guessed
    with pytest.raises(prism.Error, match="needs a draft_model"):
        m.generate_ids(ids=PROMPT_IDS, speculate="draft")
    with pytest.raises(prism.Error, match="another Model"):
        m.generate_ids(ids=PROMPT_IDS, speculate="draft", draft_model=m)
    with pytest.raises(prism.Error, match="not one of none, lookup, draft, mtp"):
        m.generate_ids(ids=PROMPT_IDS, speculate="maybe")
    with pytest.raises(prism.Error, match="draft_tokens"):
        m.generate_ids(ids=PROMPT_IDS, speculate="lookup", draft_tokens=0)


def test_multi_token_prediction_head_gives_the_same_ids():
    qwen = os.path.join(SOURCE, "tests", "data", "qwen3_5", "tiny-bf16-tied")
    m = prism.llm.Model.load(qwen, dtype="f32", seqlen=64, draft_head=True)
    ids = [151644, 872, 198, 3838, 374]
    want = m.generate_ids(ids=ids, max_tokens=20)
    run = m._start(None, ids, 20, 0.0, 1.0, 0, 0.0, 1.0, 0.0, 0.0, 0, None, "mtp", None, 3)
    got = []
    while (step := run.next()) is not None:
        got.append(step[0])
    assert got == want
    assert run.guesses[0] > 0
    without = prism.llm.Model.load(qwen, dtype="f32", seqlen=64)
    with pytest.raises(prism.Error, match="draft_head=True"):
        without.generate_ids(ids=ids, speculate="mtp")
    with pytest.raises(prism.Error, match="no multi-token prediction head"):
        prism.llm.Model.load(TINY, seqlen=64, draft_head=True)


def test_penalties_as_the_cli():
    ids = "--prompt-ids=" + ",".join(map(str, PROMPT_IDS))
    m = prism.llm.Model.load(TINY, platform="cpu", dtype="f32", seqlen=64)
    plain = m.generate_ids(ids=PROMPT_IDS, max_tokens=24)
    for flags, kwargs in [(["--frequency-penalty=1.5"], {"frequency_penalty": 1.5}),
                          (["--presence-penalty=2", "--repetition-penalty=1.3"],
                           {"presence_penalty": 2.0, "repetition_penalty": 1.3})]:
        want = cli("llm", f"--model={TINY}", ids, "--max-tokens=24", "--print-ids",
                   "--seqlen=64", "--dtype=f32", *flags)
        got = m.generate_ids(ids=PROMPT_IDS, max_tokens=24, **kwargs)
        assert got == [int(i) for i in want.split()]
        assert got != plain
    with pytest.raises(prism.Error, match="frequency penalty must be in"):
        m.generate_ids(ids=PROMPT_IDS, frequency_penalty=2.5)


# Bounded strings, an enum, a boolean, an integer (at most 32 bytes): every answer ends.
WEATHER = {"type": "object", "additionalProperties": False, "required": ["sky", "wind", "ok"],
           "properties": {"sky": {"enum": ["clear", "cloudy", "rain"]},
                          "wind": {"type": "integer"}, "ok": {"type": "boolean"},
                          "notes": {"type": "array", "maxItems": 2,
                                    "items": {"type": "string", "maxLength": 4}}}}


def test_json_schema_as_the_cli(tiny_with_tokenizer):
    jsonschema = pytest.importorskip("jsonschema")
    m = prism.llm.Model.load(tiny_with_tokenizer, dtype="f32", seqlen=256)
    text = m.generate(ids=PROMPT_IDS, max_tokens=200, json_schema=WEATHER)
    jsonschema.validate(json.loads(text), WEATHER)
    ids = m.generate_ids(ids=PROMPT_IDS, max_tokens=200, json_schema=json.dumps(WEATHER))
    want = cli("llm", f"--model={tiny_with_tokenizer}", "--prompt-ids=" +
               ",".join(map(str, PROMPT_IDS)), "--max-tokens=200", "--print-ids", "--seqlen=256",
               "--dtype=f32", f"--json-schema={json.dumps(WEATHER)}")
    assert ids == [int(i) for i in want.split()]
    assert ids != m.generate_ids(ids=PROMPT_IDS, max_tokens=len(ids))  # the schema changed them
    sampled = m.generate(ids=PROMPT_IDS, max_tokens=200, temperature=1.0, seed=3, json=True)
    assert sampled.lstrip().startswith("{")
    with pytest.raises(prism.Error, match="unknown type 'strin'"):
        m.generate(ids=PROMPT_IDS, json_schema={"type": "strin"})
    with pytest.raises(prism.Error, match="not both"):
        m.generate(ids=PROMPT_IDS, json=True, json_schema=WEATHER)
    with pytest.raises(prism.Error, match="not supported"):
        m.generate(ids=PROMPT_IDS, json=True, speculate="lookup")


def test_sampling_is_seeded(tiny_with_tokenizer):
    m = prism.llm.Model.load(tiny_with_tokenizer, dtype="f32", seqlen=128)
    a = m.generate_ids(ids=PROMPT_IDS, max_tokens=12, temperature=1.0, top_p=0.9, seed=7)
    b = m.generate_ids(ids=PROMPT_IDS, max_tokens=12, temperature=1.0, top_p=0.9, seed=7)
    assert a == b
    assert len(a) == 12


def test_bad_input(tmp_path):
    missing = str(tmp_path / "nothing")
    with pytest.raises(prism.Error) as e:
        prism.llm.Model.load(missing)
    assert missing in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(prism.Error, match="dtype"):
        prism.llm.Model.load(TINY, dtype="f16")
    with pytest.raises(prism.Error, match="no-such-platform"):
        prism.llm.Model.load(TINY, platform="no-such-platform")
    m = prism.llm.Model.load(TINY, dtype="f32", seqlen=16)
    with pytest.raises(prism.Error, match="outside the vocabulary"):
        m.generate_ids(ids=[1, 10**9])
    with pytest.raises(prism.Error, match="max_tokens"):
        m.generate_ids(ids=[1], max_tokens=-1)
    with pytest.raises(prism.Error, match="seqlen"):
        m.generate_ids(ids=[1] * 17)
    with pytest.raises(prism.Error, match="no tokenizer"):
        m.generate("Hello")
    with pytest.raises(ValueError):
        m.generate_ids(prompt="a", ids=[1])
    with pytest.raises(prism.Error):
        prism.Tokenizer.load(missing)
    # The model still works after the errors, and a full cache ends the generation.
    assert len(m.generate_ids(ids=[1, 2, 3], max_tokens=100)) == 16 - 3 + 1
