"""Writes tests/data/gguf/quant_types.gguf: the fixture prism's GGUF reader and dequantizers
are checked against (tests/unit/gguf_test.cpp), made with the `gguf` package from PyPI (the
writer and the quantizers llama.cpp's own tools use).

For each ggml type prism dequantizes, a small tensor NAME of that type and NAME.ref, the
package's dequantization of it as F32. The C++ test dequantizes NAME and compares it with
NAME.ref bit for bit. Quantized tensors hold two kinds of rows:
  - values quantized by the package (types it can quantize): zeros, large magnitudes,
    negatives only, mixed signs, a ramp;
  - random bits with the block's f16 scales set to chosen finite values (0, negatives, the
    largest f16, subnormals): every bit of the packed values and scales gets exercised, and
    the K-quants, which the package cannot quantize, get their test data this way.
Plus metadata of every value type (tests check the values written here) and a few layout
cases: a 3-d tensor, an alignment of 64.

Run: .venv/bin/python tools/make_gguf_fixtures.py   (needs scripts/setup.sh --tools)
"""
import os
import sys

# tools/gguf.py (the benches' minimal writer) would shadow the package of the same name: import
# the package with this script's folder out of the path.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import numpy as np  # noqa: E402
import gguf  # noqa: E402
from gguf import GGMLQuantizationType as T, GGUFValueType as V  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "data", "gguf", "quant_types.gguf")
ALIGNMENT = 64

# Byte offsets of each block's f16 scales (d, and dmin / m where the type has one).
SCALE_OFFSETS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
# Finite f16 scales, edge cases first: zero, negative zero, the largest f16, the smallest
# normal and subnormal ones, negatives, ordinary values.
SCALES = np.array([0.0, -0.0, 65504.0, 6.103515625e-05, 5.960464477539063e-08, -1.0, -0.0123,
                   0.5, 3.140625, 1e-3, -7.5, 100.0], dtype=np.float16)


def edge_rows(row_len, rng):
    """Rows of values to quantize: zeros, large magnitudes, negatives, mixed, a ramp."""
    rows = [
        np.zeros(row_len),
        np.full(row_len, 60000.0) * np.where(np.arange(row_len) % 3 == 0, -1, 1),
        -np.abs(rng.normal(0, 2, row_len)) - 0.5,
        rng.normal(0, 1, row_len),
        np.linspace(-1e4, 1e4, row_len),
        np.where(np.arange(row_len) % 7 == 0, 1e-6, 0.0),
    ]
    return np.stack(rows).astype(np.float32)


def random_blocks(qtype, n_blocks, rng):
    """Random bits with every f16 scale replaced by one of SCALES."""
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for b in range(n_blocks):
        for k, off in enumerate(SCALE_OFFSETS[qtype]):
            s = SCALES[(b * 5 + k * 3) % len(SCALES)]
            blocks[b, off:off + 2] = np.frombuffer(s.tobytes(), dtype=np.uint8)
    if n_blocks > 1:
        # One block of all ones in the packed values and scales, with the largest scale:
        # the K-quants' 6-bit scales and mins at 63, every value at its maximum.
        blocks[-1, :] = 0xFF
        for off in SCALE_OFFSETS[qtype]:
            blocks[-1, off:off + 2] = np.frombuffer(np.float16(65504.0).tobytes(), np.uint8)
    return blocks


def add(writer, name, data, qtype, shape):
    """Adds NAME (raw bytes of `qtype`, numpy `shape`) and NAME.ref, the package's F32."""
    ref = gguf.quants.dequantize(data, qtype).reshape(shape).astype(np.float32)
    if qtype in (T.F32, T.F16):
        dtype = np.float32 if qtype == T.F32 else np.float16
        writer.add_tensor(name, data.view(dtype).reshape(shape))
    else:
        # The package takes a quantized tensor as bytes, one row of bytes per row.
        data = data.reshape(int(np.prod(shape[:-1])), -1)
        writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
    writer.add_tensor(name + ".ref", ref)


def main():
    rng = np.random.default_rng(20240611)
    w = gguf.GGUFWriter(OUT, "prism-test")
    w.add_custom_alignment(ALIGNMENT)

    # Metadata: one key per value type, arrays of each kind (expected in gguf_test.cpp).
    w.add_string("general.name", "quant types")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 65000)
    w.add_int16("test.i16", -32000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_bool("test.bool_true", True)
    w.add_bool("test.bool_false", False)
    w.add_string("test.string", "héllo \"gguf\"\n")
    w.add_uint64("test.u64", 18000000000000000000)
    w.add_int64("test.i64", -9000000000000000000)
    w.add_float64("test.f64", -2.5e-300)
    w.add_key_value("test.array_i32", [1, -2, 3], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("test.array_u8", [0, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("test.array_f32", [0.5, -1.25], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("test.array_bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("test.array_string", ["a", "", "ü"], V.ARRAY, sub_type=V.STRING)
    w.add_key_value("tokenizer.ggml.tokens", [f"tok{i}" for i in range(100)], V.ARRAY,
                    sub_type=V.STRING)

    # Plain types: specials included (infinities, NaN, signed zero, subnormals).
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3.4e38, 65504.0, 1e-7,
                         -1.5, 2.0**-24, 1.0 / 3.0], dtype=np.float32)
    f = np.concatenate([specials, rng.normal(0, 10, 64 - len(specials)).astype(np.float32)])
    add(w, "f32", f.view(np.uint8), T.F32, (2, 32))
    with np.errstate(over="ignore"):  # -3.4e38 becomes -inf in f16, on purpose
        h16 = specials.astype(np.float16)
    h = np.concatenate([h16,
                        rng.normal(0, 10, 64 - len(specials)).astype(np.float16)])
    add(w, "f16", h.view(np.uint8), T.F16, (2, 32))
    add(w, "bf16", gguf.quants.quantize(f.reshape(2, 32), T.BF16), T.BF16, (2, 32))
    # A 3-d tensor: dims innermost first in the file, shape outermost first in the API.
    add(w, "f32_3d", rng.normal(0, 1, 2 * 3 * 32).astype(np.float32).view(np.uint8), T.F32,
        (2, 3, 32))

    row_len = 64
    for qtype in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
        quantized = gguf.quants.quantize(edge_rows(row_len, rng), qtype)
        blocks_per_row = row_len // gguf.GGML_QUANT_SIZES[qtype][0]
        noise = random_blocks(qtype, 4 * blocks_per_row, rng).reshape(4, -1)
        data = np.concatenate([quantized, noise])
        add(w, qtype.name.lower(), data, qtype, (data.shape[0], row_len))

    for qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
        blocks = random_blocks(qtype, 4, rng)
        add(w, qtype.name.lower(), blocks.reshape(2, -1), qtype, (2, 512))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {os.path.relpath(OUT)}: {os.path.getsize(OUT)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
