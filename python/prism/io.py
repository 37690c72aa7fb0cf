"""prism.io: stores of tensors (safetensors files, checkpoints, GGUF files; local, https://,
hf://, s3://) and weights loaded from them onto a platform for a program (docs/python.md)."""
from prism import _prism

Store = _prism.Store
Weights = _prism.Weights


def open(uri):  # noqa: A001 (prism.io.open, as the C++ io::Store::open)
    """The store at `uri`: a .safetensors file, a checkpoint directory (or https/hf/s3 prefix)
    with model.safetensors or an index, or a GGUF file. Only headers are read here."""
    return Store.open(str(uri))


def load(store, program):
    """The weights `program` declared (prism.Tensor.parameter), streamed from `store` onto the
    program's platform: each tensor checked against the declared shape."""
    if isinstance(store, str):
        store = open(store)
    return _prism.load(store, program._native)
