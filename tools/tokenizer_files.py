#!/usr/bin/env python3
"""The real tokenizers the tests use (Llama 3, Llama 3.1, Qwen3), unpacked from the archives
committed in tests/data/tokenizers/models/ (see the README there).

Each archive NAME.tar.xz holds a directory NAME/ with tokenizer.json, tokenizer_config.json and
PACKAGE-LICENSE. `tokenizer_dir(NAME)` unpacks it, once, into a cache folder and returns the
path of that directory, ready for `tokenizers.Tokenizer.from_file(dir + "/tokenizer.json")` or
`AutoTokenizer.from_pretrained(dir)`. The cache is, in order of preference, the `cache`
argument, the environment variable PRISM_TOKENIZER_CACHE, or build/tokenizer_files/ in the
repository (ignored by git, beside CMake's own unpacked copy in <build>/data/tokenizers/).
A directory is unpacked again when its archive changes (a stamp keeps the archive's SHA-256).

  python3 tools/tokenizer_files.py [--cache DIR] [NAME ...]   # prints each directory's path
"""
import argparse
import hashlib
import os
import shutil
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHIVES = os.path.join(ROOT, "tests", "data", "tokenizers", "models")
NAMES = ("llama3", "llama3_1", "qwen3")


def default_cache():
    return os.environ.get("PRISM_TOKENIZER_CACHE") or os.path.join(ROOT, "build", "tokenizer_files")


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tokenizer_dir(name, cache=None):
    """The path of the unpacked directory of tests/data/tokenizers/models/NAME.tar.xz."""
    archive = os.path.join(ARCHIVES, name + ".tar.xz")
    if not os.path.isfile(archive):
        raise FileNotFoundError(f"no tokenizer archive {archive} (known: {', '.join(NAMES)})")
    cache = os.path.abspath(cache or default_cache())
    target = os.path.join(cache, name)
    stamp = os.path.join(cache, name + ".sha256")
    digest = _sha256(archive)
    if os.path.isdir(target) and os.path.isfile(stamp):
        with open(stamp) as f:
            if f.read().strip() == digest:
                return target
    os.makedirs(cache, exist_ok=True)
    # Unpack beside the target and move it into place, so that a reader never sees half a
    # directory and two runs at once do not mix their files.
    staging = tempfile.mkdtemp(prefix=name + ".", dir=cache)
    try:
        with tarfile.open(archive, "r:xz") as tar:
            members = tar.getmembers()
            for m in members:
                inside = m.name == name or (m.name.startswith(name + "/") and ".." not in m.name.split("/"))
                if not inside or not (m.isfile() or m.isdir()):
                    raise ValueError(f"{archive}: unexpected member {m.name!r} (only files under {name}/)")
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
                tar.extractall(staging, members=members, filter="data")
            else:
                tar.extractall(staging, members=members)
        unpacked = os.path.join(staging, name)
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.replace(unpacked, target)
        with open(stamp + ".tmp", "w") as f:
            f.write(digest + "\n")
        os.replace(stamp + ".tmp", stamp)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", help="where to unpack (default: %(default)s)", default=default_cache())
    parser.add_argument("names", nargs="*", default=list(NAMES), help="tokenizers (default: all)")
    args = parser.parse_args()
    for name in args.names:
        if name not in NAMES:
            parser.error(f"unknown tokenizer '{name}' (known: {', '.join(NAMES)})")
        print(tokenizer_dir(name, args.cache))


if __name__ == "__main__":
    sys.exit(main())
