#!/usr/bin/env python3
"""Refuses an include that points the wrong way between prism's layers.

The layers and what each links are declared once, in CMakeLists.txt (prism_layer), which writes
them to <build>/layers.txt as lines "name folder dep...". A file in a layer's folder may include
headers of that layer and of the layers below it (what it links, transitively), nothing else.

usage: check.py LAYERS_TXT PRISM_DIR
"""
import os
import re
import sys

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"prism/([^"]+)"', re.MULTILINE)


def main(argv):
    if len(argv) != 3:
        print("usage: check.py LAYERS_TXT PRISM_DIR", file=sys.stderr)
        return 2
    layers_txt, root = argv[1], argv[2]
    folder, deps = {}, {}
    try:
        with open(layers_txt, encoding="utf-8") as f:
            for line in f:
                words = line.split()
                if not words:
                    continue
                if len(words) < 2:
                    print(f"layers: malformed line in {layers_txt}: {line.strip()!r}",
                          file=sys.stderr)
                    return 2
                folder[words[0]] = words[1]
                deps[words[0]] = words[2:]
    except OSError as e:
        print(f"layers: cannot read {layers_txt}: {e.strerror}", file=sys.stderr)
        return 2
    if not os.path.isdir(root):
        print(f"layers: {root} is not a folder", file=sys.stderr)
        return 2

    def below(name, seen=None):
        seen = set() if seen is None else seen
        for d in deps.get(name, []):
            if d not in seen:
                seen.add(d)
                below(d, seen)
        return seen

    # The layer of a path under prism/: the layer whose folder is its longest prefix.
    by_folder = sorted(folder.items(), key=lambda kv: -len(kv[1]))

    def layer_of(path):
        for name, f in by_folder:
            if path == f or path.startswith(f + "/"):
                return name
        return None

    errors = []
    for dirpath, _, files in os.walk(root):
        for file in sorted(files):
            if not file.endswith((".h", ".cpp")):
                continue
            full = os.path.join(dirpath, file)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            mine = layer_of(rel)
            if mine is None:
                errors.append(f"prism/{rel} is in no layer (add its folder to CMakeLists.txt)")
                continue
            allowed = below(mine) | {mine}
            with open(full, encoding="utf-8") as f:
                text = f.read()
            for m in INCLUDE.finditer(text):
                theirs = layer_of(m.group(1))
                if theirs is None or theirs not in allowed:
                    line = text.count("\n", 0, m.start()) + 1
                    errors.append(
                        f"prism/{rel}:{line} includes prism/{m.group(1)}: layer {mine} may use "
                        f"only {', '.join(sorted(allowed))}")
    for e in errors:
        print(e)
    print(f"layers: {len(folder)} layers, {len(errors)} wrong-way includes")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
