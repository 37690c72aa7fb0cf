"""The peer of prism-bench-tokenizer: encodes the same text with Hugging Face `tokenizers` (Rust,
through its Python package) and prints one JSON line: the wall seconds and the process's CPU
seconds of each run, the number of ids and a hash of them (FNV-1a, as the C++ side computes it).

  python hf_tokenizers_encode.py TOKENIZER TEXT_FILE RUNS text|lines

`text` encodes the whole file as one sequence (Tokenizer.encode); `lines` splits it after every
"\n" (the pieces concatenate to the file, as prism-bench-tokenizer splits it) and encodes the
pieces with Tokenizer.encode_batch, the ids hashed in order. The caller sets the threads:
RAYON_NUM_THREADS and TOKENIZERS_PARALLELISM (false: encode_batch runs on the calling thread).
TOKENIZER: a directory holding tokenizer.json, or the file.
"""
import json
import os
import sys
import time

from tokenizers import Tokenizer


def fnv1a(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        h = ((h ^ i) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%x" % h


def main():
    if len(sys.argv) != 5 or sys.argv[4] not in ("text", "lines"):
        sys.exit("usage: hf_tokenizers_encode.py TOKENIZER TEXT_FILE RUNS text|lines")
    location, text_file, runs, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if os.path.isdir(location):
        location = os.path.join(location, "tokenizer.json")
    tokenizer = Tokenizer.from_file(location)
    with open(text_file, encoding="utf-8", newline="") as f:
        text = f.read()
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    if not lines[-1]:
        lines.pop()

    seconds, cpu_seconds = [], []
    for _ in range(runs):
        cpu, start = time.process_time(), time.perf_counter()
        if mode == "text":
            encodings = [tokenizer.encode(text, add_special_tokens=False)]
        else:
            encodings = tokenizer.encode_batch(lines, add_special_tokens=False)
        seconds.append(time.perf_counter() - start)
        cpu_seconds.append(time.process_time() - cpu)
    ids = [i for e in encodings for i in e.ids]
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "ids": len(ids),
                      "hash": fnv1a(ids), "pieces": len(encodings)}))


if __name__ == "__main__":
    main()
