"""A minimal GGUF (version 3) writer, from the format's specification: the header (magic,
version, tensor and key-value counts), typed metadata key-values, tensor infos (name,
dimensions innermost first, ggml type, offset into the data section), then the tensor data,
each tensor starting at a multiple of `general.alignment` (32 unless stated).

Pure Python (no numpy): tensor data is anything with the buffer protocol, written as it is.
Used by tools/make_bench_llama.py; tests/tools/gguf_writer_test.py reads files back.
"""
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

# ggml tensor types used here, and their bytes per element.
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30
_ELEMENT_BYTES = {GGML_F32: 4, GGML_F16: 2, GGML_BF16: 2}

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
    exactly prod(shape) elements of `ggml_type` in row-major order."""

    def __init__(self, name, shape, ggml_type, data):
        self.name, self.shape, self.ggml_type, self.data = name, tuple(shape), ggml_type, data
        count = 1
        for d in self.shape:
            count *= d
        self.nbytes = count * _ELEMENT_BYTES[ggml_type]
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
