"""prism.compile: a function over tagged tensors, traced once for the input shapes given and
compiled for a platform; the program is then called with arrays (docs/python.md)."""
from prism import _prism


class Program:
    """A compiled program: call it with one array per input shape (NumPy arrays, or any array
    with DLPack on the CPU: PyTorch, JAX), and, if the function declared parameters,
    weights=prism.io.load(store, program). Returns NumPy arrays (one, or a list for several
    outputs); bf16 results come back widened to float32, NumPy having no bf16."""

    def __init__(self, native):
        self._native = native

    @property
    def parameters(self):
        """[(name, Shape)] of the parameters the function declared."""
        return self._native.parameters

    @property
    def input_shapes(self):
        return self._native.input_shapes

    @property
    def output_shapes(self):
        return self._native.output_shapes

    @property
    def platform(self):
        return self._native.platform

    def __call__(self, *inputs, weights=None):
        out = self._native._call(list(inputs), weights)
        return out[0] if len(out) == 1 else out


def compile(fn, inputs, platform=None):
    """Traces fn(*tensors), one prism.Tensor per shape in `inputs` (prism.Shape), and compiles
    what it returns (a Tensor or a list of them) for `platform` (default: PRISM_PLATFORM, else
    the best one here)."""
    return Program(_prism.compile(fn, list(inputs), platform or ""))
