"""Writes tests/data/gguf/quantize_ref.gguf: what prism's quantizers (prism/quant/quantize.h)
must produce, bit for bit, made with the `gguf` package from PyPI (gguf.quants.quantize, the
quantization llama.cpp's converter runs).

For each type, NAME.src (F32 values) and NAME (the package's quantization of them, as the raw
bytes of that type). tests/unit/quantize_test.cpp quantizes NAME.src and compares with NAME.
Rows: zeros, a constant, large magnitudes, negatives only, ties for the rounding (values that
land on .5 steps), a ramp, tiny values, then normal noise at several scales.

Run: .venv/bin/python tools/make_quantize_fixtures.py   (needs scripts/setup.sh --tools)
"""
import os
import sys

# tools/gguf.py would shadow the package of the same name.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import numpy as np  # noqa: E402
import gguf  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "data", "gguf", "quantize_ref.gguf")
ROW = 256


def rows(rng):
    i = np.arange(ROW)
    edge = [
        np.zeros(ROW),
        np.full(ROW, 0.75),
        np.full(ROW, 30000.0) * np.where(i % 3 == 0, -1, 1),
        -np.abs(rng.normal(0, 2, ROW)) - 0.5,
        # multiples of max/254 and max/16: x / d lands exactly on .5 steps for Q8_0 and Q4_0
        np.where(i % 32 == 0, 127.0, (i % 32) - 0.5),
        np.where(i % 32 == 0, -8.0, ((i % 16) - 8) + 0.5),
        np.linspace(-1e3, 1e3, ROW),
        np.where(i % 7 == 0, 1e-6, 0.0),
        rng.normal(0, 1e-30, ROW),
    ]
    noise = [rng.normal(0, s, ROW) for s in (0.02, 0.02, 0.1, 1.0, 1.0, 3.0, 50.0)]
    return np.stack(edge + noise).astype(np.float32)


def main():
    rng = np.random.default_rng(20241201)
    w = gguf.GGUFWriter(OUT, "prism-test")
    w.add_string("general.name", "quantize reference")
    for qtype in (T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q5_0):
        src = rows(rng)
        name = qtype.name.lower()
        w.add_tensor(name + ".src", src)
        q = gguf.quants.quantize(src, qtype)
        if qtype == T.F16:
            w.add_tensor(name, q)
        else:
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {os.path.relpath(OUT)}: {os.path.getsize(OUT)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
