"""prism from Python: the platforms, programs over tagged tensors, stores of weights, tokenizers
and chat templates, and language models, run by the same C++ as the `prism` command
(docs/python.md).

    import prism
    prism.platforms()                                 # what this build can run on
    model = prism.llm.Model.load("hf://meta-llama/Llama-3.2-1B-Instruct")
    print(model.chat([{"role": "user", "content": "Hi"}], max_tokens=64))

    x = prism.Shape("f32", {"b": 4, "d": 8})
    program = prism.compile(lambda x: (x * 2.0 + 1.0).softmax("d"), [x], platform="cpu")
    program(numpy.ones((4, 8), numpy.float32))

Errors are prism.Error (a RuntimeError) with prism's one-line message. prism computes with the
GIL released, so other Python threads run meanwhile.
"""
from prism._prism import Error, Shape, Tensor, __version__, concat, maximum, minimum, where
from prism._prism import platforms as _platforms
from prism.program import Program, compile
from prism.tokenizer import Tokenizer
from prism import io, llm

__all__ = ["Error", "Program", "Shape", "Tensor", "Tokenizer", "__version__", "compile",
           "concat", "info", "io", "llm", "maximum", "minimum", "platforms", "where"]


def platforms(available_only=False):
    """The platforms this build knows, as dicts: name, available, and either reason (why it
    cannot run here) or mesh_capacity and devices (name, memory_bytes)."""
    found = _platforms()
    return [p for p in found if p["available"]] if available_only else found


def info():
    """What `prism info` prints, as text: the version and each platform with its devices."""
    lines = [f"prism {__version__}", "", "platforms:"]
    for p in platforms():
        if not p["available"]:
            lines.append(f"  {p['name']:<8} unavailable: {p['reason']}")
            continue
        lines.append(f"  {p['name']:<8} available, a mesh of up to {p['mesh_capacity']} device"
                     + ("" if p["mesh_capacity"] == 1 else "s"))
        for d in p["devices"]:
            memory = (f"{d['memory_bytes'] / (1 << 30):.1f} GiB" if d["memory_bytes"] > 0
                      else "memory unknown")
            lines.append(f"    - {d['name']}, {memory}")
    return "\n".join(lines)
