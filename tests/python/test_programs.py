"""prism.compile, programs called with arrays, and prism.io from Python: results against NumPy,
MNIST's held-out accuracy equal to `prism mnist --eval`'s counts, the arrays' dtypes and values
kept both ways (NumPy, and PyTorch through DLPack where it is installed), and bad input raising
prism.Error."""
import gzip
import os
import re
import subprocess

import numpy as np
import pytest

import prism

CLI = os.environ["PRISM_CLI"]
SOURCE = os.environ["PRISM_SOURCE_DIR"]
MNIST = os.path.join(SOURCE, "models", "mnist")


def test_elementwise_and_reductions_against_numpy():
    x = prism.Shape("f32", {"b": 3, "d": 5})
    program = prism.compile(lambda t: [(t * 2.0 + 1.0).relu().sum("d"), t.softmax("d")], [x],
                            platform="cpu")
    a = np.linspace(-2, 2, 15, dtype=np.float32).reshape(3, 5)
    total, soft = program(a)
    np.testing.assert_allclose(total, np.maximum(a * 2 + 1, 0).sum(axis=1), rtol=1e-6)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    assert total.dtype == np.float32 and total.shape == (3,)
    assert program.input_shapes == [x]
    assert [s.dims for s in program.output_shapes] == [[("b", 3)], [("b", 3), ("d", 5)]]


def test_dot_contracts_a_tag_and_split_merge():
    x = prism.Shape("f32", [("b", 2), ("d", 6)])
    w = prism.Shape("f32", [("o", 4), ("d", 6)])
    program = prism.compile(lambda a, b: a.dot(b, "d"), [x, w])
    a = np.arange(12, dtype=np.float32).reshape(2, 6)
    b = np.arange(24, dtype=np.float32).reshape(4, 6) / 10
    np.testing.assert_allclose(program(a, b), a @ b.T, rtol=1e-6)
    heads = prism.compile(
        lambda t: t.split("d", [("h", 2), ("hd", -1)]).transpose(["h", "b", "hd"]).merge(
            ["b", "hd"], "x"), [x])
    np.testing.assert_array_equal(heads(a), a.reshape(2, 2, 3).transpose(1, 0, 2).reshape(2, 6))


NUMPY = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "i64": np.int64,
         "i32": np.int32, "i16": np.int16, "i8": np.int8, "u8": np.uint8, "u32": np.uint32}


@pytest.mark.parametrize("dtype", sorted(NUMPY))
def test_dtypes_round_trip(dtype):
    program = prism.compile(lambda t: t, [prism.Shape(dtype, {"n": 4})])
    values = np.array([0, 1, 2, 100], dtype=NUMPY[dtype])
    out = program(values)
    assert out.dtype == values.dtype
    np.testing.assert_array_equal(out, values)


def test_bf16_results_come_back_as_float32():
    program = prism.compile(lambda t: t.convert("bf16") * 2.0, [prism.Shape("f32", {"n": 3})])
    out = program(np.array([1.0, 1.5, -3.0], dtype=np.float32))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [2.0, 3.0, -6.0])


class DlpackOnly:
    """An array that offers DLPack and nothing else (no buffer protocol, no __array__)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_arrays_go_in_and_out_through_dlpack():
    program = prism.compile(lambda t: t - 1.0, [prism.Shape("f32", {"n": 3})])
    out = program(DlpackOnly(np.array([1.0, 2.0, 3.0], dtype=np.float32)))
    np.testing.assert_array_equal(out, [0.0, 1.0, 2.0])
    back = np.from_dlpack(out)  # the result's memory, not a copy
    assert back.ctypes.data == out.ctypes.data


def test_torch_tensors_go_in_and_out_through_dlpack():
    torch = pytest.importorskip("torch")
    program = prism.compile(lambda t: t * 3.0, [prism.Shape("f32", {"n": 4})])
    out = program(torch.arange(4, dtype=torch.float32))
    np.testing.assert_array_equal(out, [0, 3, 6, 9])
    # and out: the result carries DLPack (NumPy's), which PyTorch takes without a copy.
    back = torch.from_dlpack(out)
    assert back.dtype == torch.float32 and torch.equal(back, torch.tensor([0.0, 3.0, 6.0, 9.0]))
    assert back.data_ptr() == out.ctypes.data


def read_idx(name):
    with open(os.path.join(MNIST, name), "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def test_mnist_mlp_written_in_python_as_the_cli():
    """The MLP of prism/models/mnist.cpp, written here, with the weights streamed from the
    committed safetensors file: the same held-out count as `prism mnist --eval`."""
    want = re.search(r"\((\d+)/(\d+)\)", subprocess.run(
        [CLI, "mnist", "--eval"], check=True, capture_output=True, text=True).stdout)
    images, labels = read_idx("test-images-idx3-ubyte"), read_idx("test-labels-idx1-ubyte")
    batch = 500

    def mlp(images):
        x = (images.convert("f32") / 255.0).merge(["h", "w"], "pixels")
        w1 = prism.Tensor.parameter("fc1.weight", prism.Shape("f32", {"hidden": 256, "pixels": 784}))
        b1 = prism.Tensor.parameter("fc1.bias", prism.Shape("f32", {"hidden": 256}))
        w2 = prism.Tensor.parameter("fc2.weight", prism.Shape("f32", {"class": 10, "hidden": 256}))
        b2 = prism.Tensor.parameter("fc2.bias", prism.Shape("f32", {"class": 10}))
        h = (x.dot(w1, "pixels") + b1).relu()
        return (h.dot(w2, "hidden") + b2).softmax("class")

    program = prism.compile(mlp, [prism.Shape("u8", {"b": batch, "h": 28, "w": 28})],
                            platform="cpu")
    assert sorted(n for n, _ in program.parameters) == [
        "fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    store = prism.io.open(os.path.join(MNIST, "mlp.safetensors"))
    weights = prism.io.load(store, program)
    assert len(weights) == 4
    correct = 0
    for start in range(0, len(images), batch):
        probs = program(images[start:start + batch], weights=weights)
        correct += int((probs.argmax(axis=1) == labels[start:start + batch]).sum())
    assert (correct, len(images)) == (int(want.group(1)), int(want.group(2)))


def test_store_reads_tensors():
    store = prism.io.open(os.path.join(MNIST, "mlp.safetensors"))
    assert store.names() == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    assert "fc1.bias" in store and "nope" not in store and len(store) == 4
    # A file's tensors have no tags: "_" names each dimension.
    assert store.shape("fc2.weight").dims == [("_", 10), ("_", 256)]
    w = store.read("fc2.weight")
    assert w.dtype == np.float32 and w.shape == (10, 256)
    assert np.isfinite(w).all()


def test_bad_input(tmp_path):
    x = prism.Shape("f32", {"n": 4})
    program = prism.compile(lambda t: t + 1.0, [x])
    with pytest.raises(prism.Error, match="expected 4 values"):
        program(np.zeros(5, np.float32))
    with pytest.raises(prism.Error, match="expected f32"):
        program(np.zeros(4, np.int32))
    with pytest.raises(prism.Error, match="takes 1 inputs, got 2"):
        program(np.zeros(4, np.float32), np.zeros(4, np.float32))
    with pytest.raises(prism.Error, match="dot"):
        prism.compile(lambda t: t.dot(t, "nope"), [x])
    with pytest.raises(prism.Error, match="dtype"):
        prism.Shape("f17", {"n": 1})
    with pytest.raises(prism.Error):
        prism.io.open(str(tmp_path / "missing.safetensors"))
    store = prism.io.open(os.path.join(MNIST, "mlp.safetensors"))
    with pytest.raises(prism.Error, match="nope"):
        store.read("nope")
    uses_weights = prism.compile(
        lambda t: t + prism.Tensor.parameter("fc2.bias", prism.Shape("f32", {"n": 4})), [x])
    with pytest.raises(prism.Error, match="parameters"):
        uses_weights(np.zeros(4, np.float32))
    with pytest.raises(prism.Error, match="fc2.bias"):
        prism.io.load(store, uses_weights)  # 10 values in the file, 4 declared
    # An exception raised by the traced function comes through as it is.
    with pytest.raises(ZeroDivisionError):
        prism.compile(lambda t: 1 / 0, [x])
