"""A minimal GGUF (version 3) writer, from the format's specification: the header (magic,
version, tensor and key-value counts), typed metadata key-values, tensor infos (name,
dimensions innermost first, ggml type, offset into the data section), then the tensor data,
each tensor starting at a multiple of `general.alignment` (32 unless stated).

Pure Python (no numpy): tensor data is anything with the buffer protocol, written as it is;
quantize_q8_0 / dequantize_q8_0 make and read Q8_0 blocks as the gguf package does. Used by
tools/make_bench_llama.py and tools/make_tiny_gguf.py (which checks the Q8_0 functions against
the package); tests/tools/gguf_writer_test.py reads files back.
"""
import array
import math
import struct

MAGIC = b"GGUF"
VERSION = 3
ALIGNMENT = 32

# Metadata value types.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, \
    FLOAT64 = range(13)
_SCALAR_FORMATS = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I",
                   INT32: "<i", FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q",
                   FLOAT64: "<d"}

# ggml tensor types used here, and their blocks: (elements, bytes) per block.
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_BF16 = 0, 1, 2, 8, 30
_BLOCKS = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_Q4_0: (32, 18), GGML_Q8_0: (32, 34),
           GGML_BF16: (1, 2)}

# llama.cpp's token types (tokenizer.ggml.token_type).
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3


class Value:
    """A metadata value with an explicit GGUF type: Value(UINT32, 7), Value(ARRAY, [...], INT32)."""

    def __init__(self, type_, value, element_type=None):
        if type_ == ARRAY and element_type is None:
            raise ValueError("gguf: an array value needs its element type")
        self.type, self.value, self.element_type = type_, value, element_type


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(type_, value, element_type=None):
    if type_ == STRING:
        return _string(value)
    if type_ == ARRAY:
        if element_type == ARRAY:
            raise ValueError("gguf: nested arrays are not written here")
        head = struct.pack("<IQ", element_type, len(value))
        if element_type == STRING:
            return head + b"".join(_string(v) for v in value)
        fmt = _SCALAR_FORMATS[element_type]
        return head + struct.pack("<%d%s" % (len(value), fmt[1]), *value)
    return struct.pack(_SCALAR_FORMATS[type_], value)


def _infer(value):
    """The GGUF type of a plain Python value: str, bool, int (INT32 or INT64), float (FLOAT32)."""
    if isinstance(value, Value):
        return value
    if isinstance(value, str):
        return Value(STRING, value)
    if isinstance(value, bool):
        return Value(BOOL, value)
    if isinstance(value, int):
        return Value(INT32 if -2**31 <= value < 2**31 else INT64, value)
    if isinstance(value, float):
        return Value(FLOAT32, value)
    raise TypeError("gguf: give %r a type with gguf.Value" % (value,))


def _align(n, alignment):
    return (n + alignment - 1) // alignment * alignment


class Tensor:
    """A tensor to write: `shape` as numpy/PyTorch state it (outermost first); `data` holds
    exactly prod(shape) elements of `ggml_type` in row-major order (for a block type, the
    blocks of each row in turn: rows must be whole blocks)."""

    def __init__(self, name, shape, ggml_type, data):
        self.name, self.shape, self.ggml_type, self.data = name, tuple(shape), ggml_type, data
        count = 1
        for d in self.shape:
            count *= d
        elements, block_bytes = _BLOCKS[ggml_type]
        if self.shape and self.shape[-1] % elements:
            raise ValueError("gguf: tensor %s has rows of %d, not whole blocks of %d" %
                             (name, self.shape[-1], elements))
        self.nbytes = count // elements * block_bytes
        if memoryview(data).nbytes != self.nbytes:
            raise ValueError("gguf: tensor %s holds %d bytes, its shape %s needs %d" %
                             (name, memoryview(data).nbytes, self.shape, self.nbytes))


def write(path, metadata, tensors, alignment=ALIGNMENT):
    """Writes a GGUF file: `metadata` maps keys to values (plain or gguf.Value), in order;
    `tensors` is a list of gguf.Tensor, written in that order. Returns the file's size."""
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        raise ValueError("gguf: tensor names repeat")
    kv = dict(metadata)
    if alignment != ALIGNMENT:
        kv["general.alignment"] = Value(UINT32, alignment)
    head = [MAGIC, struct.pack("<IQQ", VERSION, len(tensors), len(kv))]
    for key, value in kv.items():
        v = _infer(value)
        head.append(_string(key) + struct.pack("<I", v.type) +
                    _value(v.type, v.value, v.element_type))
    offset = 0
    for t in tensors:
        offset = _align(offset, alignment)
        dims = tuple(reversed(t.shape)) or (1,)  # ggml lists the innermost dimension first
        head.append(_string(t.name) + struct.pack("<I", len(dims)) +
                    struct.pack("<%dQ" % len(dims), *dims) + struct.pack("<IQ", t.ggml_type, offset))
        offset += t.nbytes
    header = b"".join(head)
    with open(path, "wb") as f:
        f.write(header)
        f.write(b"\0" * (_align(len(header), alignment) - len(header)))
        written = 0
        for t in tensors:
            pad = _align(written, alignment) - written
            f.write(b"\0" * pad)
            f.write(memoryview(t.data).cast("B"))
            written += pad + t.nbytes
        return f.tell()


def llama_tensor_name(hf):
    """llama.cpp's name for a Hugging Face Llama tensor."""
    fixed = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    if hf in fixed:
        return fixed[hf]
    layer, rest = hf[len("model.layers."):].split(".", 1)
    return "blk.%s.%s" % (layer, {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight"}[rest])


def llama_rope_row_order(rows, heads):
    """The row order llama.cpp expects for a Hugging Face q_proj / k_proj weight of `rows`
    rows: Hugging Face rotates the two halves of each head (rotate_half), llama.cpp rotates
    adjacent pairs, so within each head row 2i of the GGUF tensor is row i of the Hugging Face
    one and row 2i+1 is row i + head_dim/2. Returns the Hugging Face row for each GGUF row."""
    if rows % heads or (rows // heads) % 2:
        raise ValueError("gguf: %d rows do not split into %d heads of even size" % (rows, heads))
    half = rows // heads // 2
    order = []
    for h in range(heads):
        for i in range(half):
            order += [h * 2 * half + i, h * 2 * half + half + i]
    return order


def quantize_q8_0(values):
    """Q8_0 blocks (bytes) of `values` (float32 values, a multiple of 32 of them), bit for bit
    what the gguf package's gguf.quants.quantize writes: per block of 32, the scale
    d = max|x| / 127 and each x * (1/d) rounded half away from zero, computed in float32, then d
    stored as float16. Plain Python: float32 arithmetic is Python's double arithmetic rounded
    to float32 after each operation (exact for +, *, / of float32 operands, since a double has
    more than twice the bits), done here by array('f')."""
    if len(values) % 32:
        raise ValueError("gguf: Q8_0 takes whole blocks of 32 values, not %d" % len(values))
    out = bytearray()
    for start in range(0, len(values), 32):
        block = values[start:start + 32]
        d = array.array("f", [max(abs(x) for x in block) / 127])[0]
        inverse = array.array("f", [1 / d])[0] if d else 0.0
        scaled = array.array("f", [x * inverse for x in block])
        # a + 0.5 is exact in double for |a| < 2**29, so floor gives round-half-away.
        q = [int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1) for x in scaled]
        out += struct.pack("<e", d) + struct.pack("<32b", *q)
    return bytes(out)


def quantize_q4_0(values):
    """Q4_0 blocks (bytes) of `values` (float32 values, a multiple of 32 of them), bit for bit
    what the gguf package's gguf.quants.quantize writes: per block of 32, the value of largest
    magnitude (the first of equals) m, d = m / -8, each q = trunc(x * (1/d) + 8.5) clipped to
    0..15, element j in the low nibble of byte j and element j + 16 in its high one, all in
    float32 as quantize_q8_0 computes it, then d stored as float16."""
    if len(values) % 32:
        raise ValueError("gguf: Q4_0 takes whole blocks of 32 values, not %d" % len(values))
    f32 = lambda x: array.array("f", [x])[0]  # noqa: E731
    out = bytearray()
    for start in range(0, len(values), 32):
        block = values[start:start + 32]
        extreme = 0.0
        for x in block:
            if abs(x) > abs(extreme):
                extreme = x
        d = f32(extreme / -8)
        inverse = f32(1 / d) if d else 0.0
        q = [min(15, max(0, int(f32(f32(x * inverse) + 8.5)))) for x in block]
        out += struct.pack("<e", d) + bytes(q[j] | q[j + 16] << 4 for j in range(16))
    return bytes(out)


def dequantize_q8_0(data):
    """The float32 values of Q8_0 blocks, as gguf.quants.dequantize gives them (q * d: exact
    in float32, as an int8 times a float16 has at most 19 significant bits)."""
    out = array.array("f")
    for start in range(0, len(data), 34):
        (d,) = struct.unpack_from("<e", data, start)
        out.extend(q * d for q in struct.unpack_from("<32b", data, start + 2))
    return out
