#!/usr/bin/python3
"""Checks tools/gguf.py: a file it writes is read back, field by field, by a separate reader
written here from the GGUF specification; the Q/K row order it gives makes llama.cpp's
adjacent-pair rope compute what Hugging Face's rotate-half rope computes; bad tensors are
refused. Plain Python, no packages: runs in CI. (That llama.cpp itself loads the files and
agrees with prism is what `prism-bench llm` shows.)"""
import array
import math
import os
import random
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tools"))
import gguf  # noqa: E402


class Reader:
    """Reads a GGUF v3 file: metadata {key: (type, value)}, tensors {name: (dims, type, bytes)}."""

    FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
               12: "d"}

    def __init__(self, path):
        with open(path, "rb") as f:
            self.raw = f.read()
        self.at = 0
        assert self.take(4) == b"GGUF", "magic"
        self.version, tensor_count, kv_count = self.unpack("<IQQ")
        self.metadata = {}
        for _ in range(kv_count):
            key = self.string()
            (type_,) = self.unpack("<I")
            self.metadata[key] = (type_, self.value(type_))
        alignment = self.metadata.get("general.alignment", (4, 32))[1]
        infos = []
        for _ in range(tensor_count):
            name = self.string()
            (n_dims,) = self.unpack("<I")
            dims = self.unpack("<%dQ" % n_dims)
            type_, offset = self.unpack("<IQ")
            infos.append((name, dims, type_, offset))
        data = (self.at + alignment - 1) // alignment * alignment
        self.data_start, self.alignment = data, alignment
        self.tensors = {}
        for name, dims, type_, offset in infos:
            count = 1
            for d in dims:
                count *= d
            size = count * {0: 4, 1: 2, 30: 2}[type_]
            self.tensors[name] = (dims, type_, offset, self.raw[data + offset:data + offset + size])

    def take(self, n):
        out = self.raw[self.at:self.at + n]
        self.at += n
        return out

    def unpack(self, fmt):
        out = struct.unpack_from(fmt, self.raw, self.at)
        self.at += struct.calcsize(fmt)
        return out

    def string(self):
        (n,) = self.unpack("<Q")
        return self.take(n).decode("utf-8")

    def value(self, type_):
        if type_ == 8:
            return self.string()
        if type_ == 9:
            element, n = self.unpack("<IQ")
            return [self.value(element) for _ in range(n)]
        return self.unpack("<" + self.FORMATS[type_])[0]


class GgufWriterTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "t.gguf")

    def tearDown(self):
        self.dir.cleanup()

    def test_reads_back(self):
        matrix = array.array("H", range(15))  # 3 x 5 bf16 bit patterns
        vector = array.array("f", [0.5, -1.0, 2.0])
        metadata = {
            "general.architecture": "llama",
            "llama.block_count": gguf.Value(gguf.UINT32, 2),
            "llama.rope.freq_base": 500000.0,
            "tokenizer.ggml.add_bos_token": False,
            "big": 2**40,
            "tokenizer.ggml.tokens": gguf.Value(gguf.ARRAY, ["a", "Ġb", "<|x|>"], gguf.STRING),
            "tokenizer.ggml.token_type": gguf.Value(gguf.ARRAY, [1, 1, 3], gguf.INT32),
        }
        size = gguf.write(self.path, metadata, [
            gguf.Tensor("blk.0.attn_q.weight", (3, 5), gguf.GGML_BF16, matrix),
            gguf.Tensor("output_norm.weight", (3,), gguf.GGML_F32, vector)])
        r = Reader(self.path)
        self.assertEqual(r.version, 3)
        self.assertEqual(size, len(r.raw))
        self.assertEqual(r.metadata["general.architecture"], (8, "llama"))
        self.assertEqual(r.metadata["llama.block_count"], (4, 2))
        self.assertEqual(r.metadata["llama.rope.freq_base"], (6, 500000.0))
        self.assertEqual(r.metadata["tokenizer.ggml.add_bos_token"], (7, False))
        self.assertEqual(r.metadata["big"], (11, 2**40))
        self.assertEqual(r.metadata["tokenizer.ggml.tokens"], (9, ["a", "Ġb", "<|x|>"]))
        self.assertEqual(r.metadata["tokenizer.ggml.token_type"], (9, [1, 1, 3]))
        self.assertEqual(list(r.metadata), list(metadata))  # in the order given
        dims, type_, offset, data = r.tensors["blk.0.attn_q.weight"]
        self.assertEqual((dims, type_, offset), ((5, 3), 30, 0))  # innermost dimension first
        self.assertEqual(data, matrix.tobytes())
        dims, type_, offset, data = r.tensors["output_norm.weight"]
        self.assertEqual((dims, type_), ((3,), 0))
        self.assertEqual(offset % 32, 0)
        self.assertEqual(r.data_start % 32, 0)
        self.assertEqual(data, vector.tobytes())

    def test_other_alignment(self):
        gguf.write(self.path, {}, [gguf.Tensor("a", (3,), gguf.GGML_F32, array.array("f", [1, 2, 3])),
                                   gguf.Tensor("b", (1,), gguf.GGML_F32, array.array("f", [4]))],
                   alignment=64)
        r = Reader(self.path)
        self.assertEqual(r.metadata["general.alignment"], (4, 64))
        self.assertEqual(r.tensors["b"][2], 64)
        self.assertEqual(r.data_start % 64, 0)
        self.assertEqual(struct.unpack("<f", r.tensors["b"][3]), (4.0,))

    def test_rope_row_order_matches_rotate_half(self):
        # Rope of a Hugging Face row (rotate_half: element i pairs with i + half) must equal,
        # after the reorder, llama.cpp's rope (element 2i pairs with 2i + 1) of the reordered
        # row: then every query-key product, and so the model, is the same.
        heads, head_dim, pos = 3, 8, 7
        half = head_dim // 2
        order = gguf.llama_rope_row_order(heads * head_dim, heads)
        self.assertEqual(order[:8], [0, 4, 1, 5, 2, 6, 3, 7])
        rng = random.Random(1)
        x = [rng.uniform(-1, 1) for _ in range(heads * head_dim)]
        freq = [10000.0 ** (-2 * i / head_dim) for i in range(half)]

        def rope_hf(v):
            out = list(v)
            for h in range(heads):
                b = h * head_dim
                for i in range(half):
                    c, s = math.cos(pos * freq[i]), math.sin(pos * freq[i])
                    out[b + i] = v[b + i] * c - v[b + i + half] * s
                    out[b + i + half] = v[b + i + half] * c + v[b + i] * s
            return out

        def rope_adjacent(v):
            out = list(v)
            for h in range(heads):
                b = h * head_dim
                for i in range(half):
                    c, s = math.cos(pos * freq[i]), math.sin(pos * freq[i])
                    out[b + 2 * i] = v[b + 2 * i] * c - v[b + 2 * i + 1] * s
                    out[b + 2 * i + 1] = v[b + 2 * i] * s + v[b + 2 * i + 1] * c
            return out

        expected = [rope_hf(x)[j] for j in order]
        got = rope_adjacent([x[j] for j in order])
        for e, g in zip(expected, got):
            self.assertAlmostEqual(e, g, places=12)

    def test_bad_input(self):
        with self.assertRaisesRegex(ValueError, "holds 8 bytes"):
            gguf.Tensor("w", (3,), gguf.GGML_F32, array.array("f", [1, 2]))
        t = gguf.Tensor("w", (1,), gguf.GGML_F32, array.array("f", [1]))
        with self.assertRaisesRegex(ValueError, "names repeat"):
            gguf.write(self.path, {}, [t, t])
        with self.assertRaisesRegex(ValueError, "even size"):
            gguf.llama_rope_row_order(12, 4)
        with self.assertRaisesRegex(TypeError, "gguf.Value"):
            gguf.write(self.path, {"k": [1, 2]}, [])


if __name__ == "__main__":
    unittest.main()
