// prism's Python module, `prism._prism` (nanobind): the platforms, tokenizers and chat templates,
// and language models, over the same C++ the `prism` command runs. The Python package
// (python/prism/) wraps it into the documented API (docs/python.md); this file only binds.
//
// - prism::Error becomes prism.Error (a RuntimeError) with the same one-line message.
// - The GIL is released while prism computes (loading, feeding tokens, sampling), so other
//   Python threads run meanwhile.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "prism/backends/registry.h"
#include "prism/core/error.h"
#include "prism/io/load.h"
#include "prism/io/store.h"
#include "prism/llm/answer_grammar.h"
#include "prism/llm/chat_template.h"
#include "prism/llm/engine.h"
#include "prism/llm/gguf_model.h"
#include "prism/llm/sampler.h"
#include "prism/llm/speculative.h"
#include "prism/llm/tokenizer.h"
#include "prism/runtime/compile.h"
#include "prism/tensor/tensor.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace prism::python {
namespace {

// The platforms this build knows: name, whether usable here (and why not), and its devices.
nb::list platform_info() {
  nb::list out;
  for (const PlatformStatus& s : platform_statuses()) {
    nb::dict p;
    p["name"] = s.name;
    p["available"] = s.available;
    if (!s.available) {
      p["reason"] = s.reason;
    } else {
      Platform& platform = get_platform(s.name);
      p["mesh_capacity"] = platform.mesh_capacity();
      nb::list devices;
      for (const DeviceInfo& d : platform.devices()) {
        nb::dict device;
        device["name"] = d.name;
        device["memory_bytes"] = d.memory_bytes;
        devices.append(device);
      }
      p["devices"] = devices;
    }
    out.append(p);
  }
  return out;
}

// --- Tensors and their data ------------------------------------------------------------------

// A shape from Python: a dtype name and [(tag, size), ...] (or a dict, in order).
Shape make_shape(const std::string& dtype,
                 const std::vector<std::pair<std::string, int64_t>>& dims) {
  std::vector<Dim> d;
  for (const auto& [tag, size] : dims) d.push_back({Tag(tag), size});
  return Shape(dtype_from_name(dtype), d);
}

std::vector<std::pair<std::string, int64_t>> shape_dims(const Shape& s) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const Dim& d : s.dims()) out.emplace_back(d.tag.str(), d.size);
  return out;
}

// Dims from Python: a dict {tag: size} (in its order) or a list of (tag, size) pairs.
std::vector<std::pair<std::string, int64_t>> dims_of(nb::handle h) {
  std::vector<std::pair<std::string, int64_t>> out;
  if (nb::isinstance<nb::dict>(h)) {
    for (auto [k, v] : nb::borrow<nb::dict>(h))
      out.emplace_back(nb::cast<std::string>(k), nb::cast<int64_t>(v));
    return out;
  }
  return nb::cast<std::vector<std::pair<std::string, int64_t>>>(h);
}

// Tags from Python: one name, or a sequence of names.
TagList tags_of(nb::handle h) {
  if (nb::isinstance<nb::str>(h)) return TagList(Tag(nb::cast<std::string>(h)));
  std::vector<Tag> out;
  for (const std::string& t : nb::cast<std::vector<std::string>>(h)) out.emplace_back(t);
  return TagList(std::move(out));
}

// NumPy's view of a dtype: its type code, bits and lanes (DLPack's terms).
nb::dlpack::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::f64:
      return nb::dtype<double>();
    case DType::f32:
      return nb::dtype<float>();
    case DType::f16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::i64:
      return nb::dtype<int64_t>();
    case DType::i32:
      return nb::dtype<int32_t>();
    case DType::i16:
      return nb::dtype<int16_t>();
    case DType::i8:
      return nb::dtype<int8_t>();
    case DType::u8:
      return nb::dtype<uint8_t>();
    case DType::u32:
      return nb::dtype<uint32_t>();
    case DType::boolean:
      return nb::dtype<bool>();
    default:
      fail("prism: {} has no NumPy dtype: convert it in the program (x.convert(\"f32\"))", name(t));
  }
}

using Array = nb::ndarray<nb::numpy>;

// A host buffer as a NumPy array over its own memory (no copy): the array owns the buffer.
Array to_numpy(HostBuffer buffer) {
  if (buffer.shape().dtype() == DType::bf16) {  // NumPy has no bf16: widened to f32
    std::vector<double> values = buffer.to_f64();
    std::vector<float> f(values.begin(), values.end());
    buffer = HostBuffer::from<float>(buffer.shape().with_dtype(DType::f32), f);
  }
  const Shape shape = buffer.shape();
  std::vector<size_t> dims;
  for (const Dim& d : shape.dims()) dims.push_back(static_cast<size_t>(d.size));
  auto* owned = new HostBuffer(std::move(buffer));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<HostBuffer*>(p); });
  return Array(owned->bytes().data(), dims.size(), dims.data(), owner, nullptr,
               numpy_dtype(shape.dtype()), nb::device::cpu::value);
}

// Any array with DLPack or the buffer protocol (NumPy, PyTorch on the CPU, JAX, ...) as a host
// buffer of `shape`: the same dtype and number of elements, C-contiguous; copied.
HostBuffer from_array(const nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>& a,
                      const Shape& shape, std::string_view what) {
  const nb::dlpack::dtype want = numpy_dtype(shape.dtype());
  PRISM_CHECK(a.dtype() == want, "{}: expected {} values for {}, got an array of another dtype",
              what, name(shape.dtype()), shape.str());
  PRISM_CHECK(static_cast<int64_t>(a.size()) == shape.numel(),
              "{}: expected {} values for {}, got {}", what, shape.numel(), shape.str(), a.size());
  return HostBuffer(shape, std::span(static_cast<const std::byte*>(a.data()), a.nbytes()));
}

// --- Programs ---------------------------------------------------------------------------------

// Weights loaded onto a platform for a program (io::load).
struct Weights {
  io::Weights buffers;
};

// A compiled program and the platform it runs on, called with arrays.
struct Program {
  Executable exe;
  Platform* platform;

  std::vector<Array> call(
      const std::vector<nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>>& args,
      const Weights* weights) const {
    const auto& shapes = exe.input_shapes();
    PRISM_CHECK(args.size() == shapes.size(), "prism.Program: takes {} inputs, got {}",
                shapes.size(), args.size());
    PRISM_CHECK(exe.parameters().empty() || weights,
                "prism.Program: the program has {} parameters: give weights=prism.io.load(...)",
                exe.parameters().size());
    std::vector<HostBuffer> host;
    for (size_t i = 0; i < args.size(); ++i)
      host.push_back(from_array(args[i], shapes[i], fmt::format("prism.Program input {}", i)));
    std::vector<HostBuffer> results;
    {
      nb::gil_scoped_release release;
      std::vector<Buffer> inputs;
      for (const HostBuffer& h : host) inputs.push_back(platform->upload(h));
      std::vector<Buffer> out = weights ? exe.call(weights->buffers, inputs)
                                        : exe.call(std::span<const Buffer>{}, inputs);
      for (const Buffer& b : out) results.push_back(b.to_host());
    }
    std::vector<Array> arrays;
    for (HostBuffer& h : results) arrays.push_back(to_numpy(std::move(h)));
    return arrays;
  }
};

// A language model: an engine (weights, states), its tokenizer and chat template when it has
// them, and one conversation that each generation starts afresh.
class Model {
 public:
  Model(const std::string& uri, const std::string& platform, const std::string& dtype,
        int64_t seqlen, bool draft_head) {
    llm::EngineOptions options;
    options.seqlen = seqlen;
    options.draft_head = draft_head;
    options.dtype = llm::compute_dtype(dtype, "prism.llm.Model");
    Platform& p = get_platform(platform);
    engine_ = std::make_unique<llm::Engine>(uri, p, options);
    if (llm::is_gguf_uri(uri) || io::exists(io::join(uri, "tokenizer.json"))) {
      tokenizer_.emplace(llm::Tokenizer::load(uri));
      if (!tokenizer_->config().chat_template.empty())
        chat_.emplace(llm::ChatTemplate::from_tokenizer(*tokenizer_));
    }
  }

  llm::Engine& engine() { return *engine_; }
  const llm::Tokenizer& tokenizer() const {
    PRISM_CHECK(tokenizer_, "prism.llm.Model: this model has no tokenizer: give ids");
    return *tokenizer_;
  }
  bool has_tokenizer() const { return tokenizer_.has_value(); }
  const std::optional<llm::ChatTemplate>& chat() const { return chat_; }
  // The vocabulary's tokens as bytes, for answers held to a grammar (made at the first).
  std::shared_ptr<const llm::GrammarMask> vocabulary() {
    if (!vocabulary_) {
      vocabulary_ = std::make_shared<const llm::GrammarMask>(
          llm::GrammarMask::of(tokenizer(), engine_->info().vocab_size));
    }
    return vocabulary_;
  }

 private:
  std::unique_ptr<llm::Engine> engine_;
  std::optional<llm::Tokenizer> tokenizer_;
  std::optional<llm::ChatTemplate> chat_;
  std::shared_ptr<const llm::GrammarMask> vocabulary_;
};

// One generation, token by token: next() returns the next id and the text it completes (a
// whole number of UTF-8 characters, possibly empty), then, at the end (an end-of-sequence id, a
// stop string, max_tokens, or a full cache), any text still pending with no id, then None. The
// tokens come from llm::Generator, as `prism llm`'s do: plainly, or with guesses from
// `drafter` checked in one step (speculative decoding); each held to `grammar` where there is
// one (json_schema).
class Generation {
 public:
  using Step = std::optional<std::pair<std::optional<int32_t>, std::string>>;

  Generation(Model& model, std::vector<int32_t> prompt, const llm::SamplerOptions& sampling,
             int64_t max_tokens, std::vector<std::string> stop,
             std::unique_ptr<llm::Drafter> drafter, int64_t draft_tokens,
             std::shared_ptr<const llm::AnswerGrammar> grammar)
      : model_(model),
        context_(std::move(prompt)),
        sampler_(sampling),
        max_tokens_(max_tokens),
        stop_(std::move(stop)),
        drafter_(std::move(drafter)),
        held_(grammar ? std::optional(llm::HeldAnswer(grammar, model.vocabulary(),
                                                      model.engine().info().eos_token_ids))
                      : std::nullopt),
        generator_(model.engine(), sampler_, context_,
                   {.drafter = drafter_.get(),
                    .draft_tokens = draft_tokens,
                    .constrain = held_ ? [this](std::span<float> logits) { held_->mask(logits); }
                                       : std::function<void(std::span<float>)>()}) {
    PRISM_CHECK(max_tokens >= 0, "prism.llm: max_tokens must be >= 0, got {}", max_tokens);
    PRISM_CHECK(!context_.empty(), "prism.llm: the prompt is empty");
    const int64_t vocab = model.engine().info().vocab_size;
    for (int32_t id : context_) {
      PRISM_CHECK(id >= 0 && id < vocab, "prism.llm: token id {} is outside the vocabulary of {}",
                  id, vocab);
    }
    if (model.has_tokenizer()) detok_.emplace(model.tokenizer(), true);
  }

  Step next() {
    if (done_) return std::nullopt;
    llm::Engine& engine = model_.engine();
    // As `prism llm` does: stop before a step that would not fit the cache.
    if (generated_ == max_tokens_ || (started_ && generator_.full())) return finish();
    int32_t id;
    {
      nb::gil_scoped_release release;
      if (!started_) {
        engine.reset();
        PRISM_CHECK(static_cast<int64_t>(context_.size()) <= engine.seqlen(),
                    "prism.llm: the prompt's {} tokens do not fit the model's seqlen of {}",
                    context_.size(), engine.seqlen());
        started_ = true;
      }
      id = generator_.next();
      if (held_) held_->take(id);
    }
    const auto& eos = engine.info().eos_token_ids;
    if (std::find(eos.begin(), eos.end(), id) != eos.end()) return finish();
    ++generated_;
    const std::string piece = detok_ ? detok_->push(id) : std::string();
    text_ += piece;
    for (const std::string& s : stop_) {  // a new match ends inside the new piece
      size_t from = text_.size() - piece.size();
      from = from > s.size() ? from - s.size() : 0;
      if (!s.empty() && text_.find(s, from) != std::string::npos) stopped_ = true;
    }
    if (!stopped_) return std::pair(std::optional(id), piece);
    done_ = true;
    return std::pair(std::optional(id), piece + (detok_ ? detok_->finish() : std::string()));
  }

  // Whether a stop string ended the text (in the last piece returned; nothing follows it).
  bool stopped() const { return stopped_; }
  // Guesses checked and kept so far (speculative decoding).
  std::pair<int64_t, int64_t> guesses() const {
    return {generator_.stats().drafted, generator_.stats().accepted};
  }

 private:
  Step finish() {
    done_ = true;
    std::string rest = detok_ ? detok_->finish() : std::string();
    if (rest.empty()) return std::nullopt;
    return std::pair(std::optional<int32_t>(), std::move(rest));
  }

  Model& model_;
  std::vector<int32_t> context_;
  llm::Sampler sampler_;
  int64_t max_tokens_, generated_ = 0;
  std::vector<std::string> stop_;
  std::unique_ptr<llm::Drafter> drafter_;
  std::optional<llm::HeldAnswer> held_;
  llm::Generator generator_;
  std::optional<llm::StreamingDetokenizer> detok_;
  std::string text_;
  bool started_ = false, done_ = false, stopped_ = false;
};

}  // namespace
}  // namespace prism::python

NB_MODULE(_prism, m) {
  using namespace prism;
  using python::Generation;
  using python::Model;
  m.doc() = "prism's C++ core; use the `prism` package, not this module";
  m.attr("__version__") = PRISM_VERSION;

  static nb::exception<Error> error(m, "Error", PyExc_RuntimeError);
  m.attr("Error").attr("__module__") = "prism";

  m.def("platforms", &python::platform_info,
        "The platforms this build knows: name, available (and reason), devices.");

  // Tensors: the tagged API, traced when prism.compile calls a Python function.
  nb::class_<Shape>(m, "Shape")
      .def(nb::init<>())
      .def(
          "__init__",
          [](Shape* self, const std::string& dtype, nb::handle dims) {
            new (self) Shape(python::make_shape(dtype, python::dims_of(dims)));
          },
          "dtype"_a, "dims"_a)
      .def_prop_ro("dtype", [](const Shape& s) { return std::string(name(s.dtype())); })
      .def_prop_ro("dims", &python::shape_dims)
      .def_prop_ro("numel", &Shape::numel)
      .def("__repr__", [](const Shape& s) { return "Shape(" + s.str() + ")"; })
      .def("__eq__", [](const Shape& a, const Shape& b) { return a == b; });

  // Tags: one name, or a list of them.
  using Tags = nb::handle;
  auto tags = [](nb::handle t) { return python::tags_of(t); };
  nb::class_<Tensor>(m, "Tensor")
      .def_static("parameter", [](const std::string& name,
                                  const Shape& shape) { return Tensor::parameter(name, shape); })
      .def_static("scalar",
                  [](double v, const std::string& dtype) {
                    return Tensor::scalar(v, dtype_from_name(dtype));
                  })
      .def_static("full", &Tensor::full)
      .def_static(
          "constant",
          [](const nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>& a, const Shape& shape) {
            return Tensor::constant(python::from_array(a, shape, "prism.Tensor.constant"));
          })
      .def_prop_ro("shape", &Tensor::shape)
      .def_prop_ro("dtype", [](const Tensor& t) { return std::string(name(t.dtype())); })
      .def("size", [](const Tensor& t, const std::string& tag) { return t.size(Tag(tag)); })
      .def("__repr__", [](const Tensor& t) { return "Tensor(" + t.shape().str() + ")"; })
      .def("neg", &Tensor::neg)
      .def("abs", &Tensor::abs)
      .def("exp", &Tensor::exp)
      .def("log", &Tensor::log)
      .def("sqrt", &Tensor::sqrt)
      .def("rsqrt", &Tensor::rsqrt)
      .def("tanh", &Tensor::tanh)
      .def("sigmoid", &Tensor::logistic)
      .def("sin", &Tensor::sin)
      .def("cos", &Tensor::cos)
      .def("relu", &Tensor::relu)
      .def("silu", &Tensor::silu)
      .def("gelu", &Tensor::gelu, "tanh_approximation"_a = false)
      .def("convert", [](const Tensor& t,
                         const std::string& dtype) { return t.convert(dtype_from_name(dtype)); })
      .def("sum", [tags](const Tensor& t, const Tags& over) { return t.sum(tags(over)); })
      .def("mean", [tags](const Tensor& t, const Tags& over) { return t.mean(tags(over)); })
      .def("max", [tags](const Tensor& t, const Tags& over) { return t.max(tags(over)); })
      .def("min", [tags](const Tensor& t, const Tags& over) { return t.min(tags(over)); })
      .def("argmax", [](const Tensor& t, const std::string& tag) { return t.argmax(Tag(tag)); })
      .def("dot", [tags](const Tensor& t, const Tensor& other,
                         const Tags& contract) { return t.dot(other, tags(contract)); })
      .def("transpose",
           [tags](const Tensor& t, const Tags& order) { return t.transpose(tags(order)); })
      .def("rename",
           [](const Tensor& t, const std::vector<std::pair<std::string, std::string>>& pairs) {
             std::vector<std::pair<Tag, Tag>> r;
             for (const auto& [a, b] : pairs) r.emplace_back(Tag(a), Tag(b));
             return t.rename(std::span<const std::pair<Tag, Tag>>(r));
           })
      .def("split",
           [](const Tensor& t, const std::string& tag,
              const std::vector<std::pair<std::string, int64_t>>& parts) {
             std::vector<Dim> d;
             for (const auto& [p, n] : parts) d.push_back({Tag(p), n});
             return t.split(Tag(tag), std::span<const Dim>(d));
           })
      .def("merge", [tags](const Tensor& t, const Tags& which,
                           const std::string& into) { return t.merge(tags(which), Tag(into)); })
      .def("reshape", &Tensor::reshape)
      .def("broadcast_to", &Tensor::broadcast_to)
      .def(
          "slice",
          [](const Tensor& t, const std::string& tag, int64_t start, int64_t length,
             int64_t stride) { return t.slice(Tag(tag), start, length, stride); },
          "tag"_a, "start"_a, "length"_a, "stride"_a = 1)
      .def("gather", [](const Tensor& t, const std::string& tag,
                        const Tensor& indices) { return t.gather(Tag(tag), indices); })
      .def("softmax", [](const Tensor& t, const std::string& tag) { return t.softmax(Tag(tag)); })
      .def("log_softmax",
           [](const Tensor& t, const std::string& tag) { return t.log_softmax(Tag(tag)); })
      .def("rms_norm", [tags](const Tensor& t, const Tags& over,
                              double eps) { return t.rms_norm(tags(over), eps); })
      .def("layer_norm", [tags](const Tensor& t, const Tags& over,
                                double eps) { return t.layer_norm(tags(over), eps); })
      .def("__neg__", [](const Tensor& a) { return -a; })
      .def("__add__", [](const Tensor& a, const Tensor& b) { return a + b; })
      .def("__add__", [](const Tensor& a, double b) { return a + b; })
      .def("__radd__", [](const Tensor& a, double b) { return b + a; })
      .def("__sub__", [](const Tensor& a, const Tensor& b) { return a - b; })
      .def("__sub__", [](const Tensor& a, double b) { return a - b; })
      .def("__rsub__", [](const Tensor& a, double b) { return b - a; })
      .def("__mul__", [](const Tensor& a, const Tensor& b) { return a * b; })
      .def("__mul__", [](const Tensor& a, double b) { return a * b; })
      .def("__rmul__", [](const Tensor& a, double b) { return b * a; })
      .def("__truediv__", [](const Tensor& a, const Tensor& b) { return a / b; })
      .def("__truediv__", [](const Tensor& a, double b) { return a / b; })
      .def("__rtruediv__", [](const Tensor& a, double b) { return b / a; });
  m.def("maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
  m.def("minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); });
  m.def("where", [](const Tensor& c, const Tensor& a, const Tensor& b) { return select(c, a, b); });
  m.def("concat", [](const std::vector<Tensor>& ts, const std::string& tag) {
    return concat(std::span<const Tensor>(ts), Tag(tag));
  });

  nb::class_<python::Program>(m, "Program")
      .def_prop_ro("parameters",
                   [](const python::Program& p) {
                     std::vector<std::pair<std::string, Shape>> out;
                     for (const auto& param : p.exe.parameters())
                       out.emplace_back(param.name, param.shape);
                     return out;
                   })
      .def_prop_ro("input_shapes", [](const python::Program& p) { return p.exe.input_shapes(); })
      .def_prop_ro("output_shapes", [](const python::Program& p) { return p.exe.output_shapes(); })
      .def_prop_ro("platform",
                   [](const python::Program& p) { return std::string(p.platform->name()); })
      .def("_call", &python::Program::call, "inputs"_a, "weights"_a.none());

  // fn is called once, while prism traces it, with a Tensor per input shape; it returns a Tensor
  // or a list of them.
  m.def(
      "compile",
      [](nb::callable fn, const std::vector<Shape>& inputs, const std::string& platform) {
        Platform& p = get_platform(platform);
        TraceFn trace = [&fn](std::span<const Tensor> args) {
          nb::list py_args;
          for (const Tensor& t : args) py_args.append(nb::cast(t));
          nb::object out = fn(*py_args);
          if (nb::isinstance<Tensor>(out)) return std::vector<Tensor>{nb::cast<Tensor>(out)};
          return nb::cast<std::vector<Tensor>>(out);
        };
        return python::Program{compile(p, trace, inputs), &p};
      },
      "fn"_a, "inputs"_a, "platform"_a = "");

  // Stores of tensors (safetensors, GGUF), and weights loaded onto a platform.
  nb::class_<io::Store>(m, "Store")
      .def_static(
          "open",
          [](const std::string& uri) {
            nb::gil_scoped_release release;
            return io::Store::open(uri);
          },
          "uri"_a)
      .def_prop_ro("uri", &io::Store::uri)
      .def("names", &io::Store::names)
      .def("shape", [](const io::Store& s, const std::string& n) { return s.shape(n); })
      .def("__contains__", [](const io::Store& s, const std::string& n) { return s.contains(n); })
      .def("__len__", &io::Store::size)
      .def_prop_ro("metadata", &io::Store::metadata)
      .def("read", [](const io::Store& s, const std::string& n) {
        const io::StoredTensor& t = s.at(n);
        PRISM_CHECK(!t.rearranged() && !t.decoded(),
                    "prism.io: {} is stored as {} blocks: load it onto a platform instead "
                    "(prism.io.load)",
                    n, t.type_name());
        HostBuffer h(s.shape(n));
        {
          nb::gil_scoped_release release;
          s.read_tensor_bytes(n, h.bytes());
        }
        return python::to_numpy(std::move(h));
      });
  nb::class_<python::Weights>(m, "Weights")
      .def("__len__", [](const python::Weights& w) { return w.buffers.size(); })
      .def("names", [](const python::Weights& w) {
        std::vector<std::string> out;
        for (const auto& [n, b] : w.buffers) out.push_back(n);
        return out;
      });
  m.def(
      "load",
      [](const io::Store& store, const python::Program& program) {
        nb::gil_scoped_release release;
        return python::Weights{io::load(store, program.exe.parameters(), *program.platform)};
      },
      "store"_a, "program"_a);

  nb::class_<llm::Tokenizer>(m, "Tokenizer")
      .def_static(
          "load",
          [](const std::string& uri) {
            nb::gil_scoped_release release;
            return llm::Tokenizer::load(uri);
          },
          "uri"_a)
      .def(
          "encode",
          [](const llm::Tokenizer& t, const std::string& text, bool add_special_tokens) {
            nb::gil_scoped_release release;
            return t.encode(text, {.add_special_tokens = add_special_tokens});
          },
          "text"_a, "add_special_tokens"_a = false)
      .def(
          "decode",
          [](const llm::Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            nb::gil_scoped_release release;
            return t.decode(ids, {.skip_special_tokens = skip_special_tokens});
          },
          "ids"_a, "skip_special_tokens"_a = false)
      .def_prop_ro("vocab_size", [](const llm::Tokenizer& t) { return t.vocab_size(); })
      .def("id_to_token", [](const llm::Tokenizer& t, int32_t id) { return t.id_to_token(id); })
      .def("is_special", [](const llm::Tokenizer& t, int32_t id) { return t.is_special(id); })
      .def_prop_ro("has_chat_template",
                   [](const llm::Tokenizer& t) { return !t.config().chat_template.empty(); })
      .def(
          "_apply_chat_template",
          [](const llm::Tokenizer& t, const std::string& messages, bool add_generation_prompt,
             const std::string& kwargs) {
            const llm::ChatTemplate chat = llm::ChatTemplate::from_tokenizer(t);
            llm::ChatTemplateOptions o;
            o.add_generation_prompt = add_generation_prompt;
            o.kwargs = nlohmann::ordered_json::parse(kwargs);
            return chat.apply(nlohmann::ordered_json::parse(messages), o);
          },
          "messages_json"_a, "add_generation_prompt"_a, "kwargs_json"_a);

  nb::class_<Model>(m, "Model")
      .def(
          "__init__",
          [](Model* self, const std::string& uri, const std::string& platform,
             const std::string& dtype, int64_t seqlen, bool draft_head) {
            nb::gil_scoped_release release;
            new (self) Model(uri, platform, dtype, seqlen, draft_head);
          },
          "uri"_a, "platform"_a = "", "dtype"_a = "auto", "seqlen"_a = 4096, "draft_head"_a = false)
      .def_prop_ro(
          "tokenizer", [](Model& model) -> const llm::Tokenizer& { return model.tokenizer(); },
          nb::rv_policy::reference_internal)
      .def_prop_ro("has_tokenizer", &Model::has_tokenizer)
      .def_prop_ro("seqlen", [](Model& model) { return model.engine().seqlen(); })
      .def_prop_ro("eos_token_ids",
                   [](Model& model) { return model.engine().info().eos_token_ids; })
      .def(
          "_generate",
          [](Model& model, std::vector<int32_t> prompt, double temperature, int64_t top_k,
             double top_p, double min_p, double repetition_penalty, double frequency_penalty,
             double presence_penalty, uint64_t seed, int64_t max_tokens,
             std::vector<std::string> stop, const std::string& speculate, Model* draft_model,
             int64_t draft_tokens, bool json, const std::string& json_schema) {
            llm::SamplerOptions s;
            s.temperature = temperature;
            s.top_k = top_k;
            s.top_p = top_p;
            s.min_p = min_p;
            s.repetition_penalty = repetition_penalty;
            s.frequency_penalty = frequency_penalty;
            s.presence_penalty = presence_penalty;
            s.seed = seed;
            PRISM_CHECK(speculate == "draft" || !draft_model,
                        "prism.llm: draft_model is for speculate=\"draft\"");
            PRISM_CHECK(draft_tokens >= 1 && draft_tokens <= llm::kMaxDraftTokens,
                        "prism.llm: draft_tokens must be between 1 and {}, got {}",
                        llm::kMaxDraftTokens, draft_tokens);
            PRISM_CHECK(speculate != "draft" || draft_model,
                        "prism.llm: speculate=\"draft\" needs a draft_model");
            PRISM_CHECK(draft_model != &model,
                        "prism.llm: the draft_model must be another Model than the one it drafts "
                        "for (each keeps its own conversation)");
            PRISM_CHECK(speculate != "mtp" || model.engine().runs_draft_head(),
                        "prism.llm: speculate=\"mtp\" needs the Model loaded with "
                        "draft_head=True (its multi-token prediction head)");
            std::unique_ptr<llm::Drafter> drafter =
                llm::make_drafter(speculate, "prism.llm",
                                  draft_model ? &draft_model->engine() : nullptr, &model.engine());
            PRISM_CHECK(!json || json_schema.empty(),
                        "prism.llm: give json=True or json_schema, not both");
            std::shared_ptr<const llm::AnswerGrammar> grammar;
            if (json || !json_schema.empty()) {
              PRISM_CHECK(speculate == "none",
                          "prism.llm: speculate with json or json_schema is not supported");
              grammar = llm::json_answer_grammar(json_schema);
            }
            return new Generation(model, std::move(prompt), s, max_tokens, std::move(stop),
                                  std::move(drafter), draft_tokens, std::move(grammar));
          },
          nb::keep_alive<0, 1>(), nb::keep_alive<0, 14>(), "prompt"_a, "temperature"_a, "top_k"_a,
          "top_p"_a, "min_p"_a, "repetition_penalty"_a, "frequency_penalty"_a, "presence_penalty"_a,
          "seed"_a, "max_tokens"_a, "stop"_a, "speculate"_a, "draft_model"_a.none(),
          "draft_tokens"_a, "json"_a, "json_schema"_a);

  nb::class_<Generation>(m, "Generation")
      .def("next", &Generation::next)
      .def_prop_ro("stopped", &Generation::stopped)
      .def_prop_ro("guesses", &Generation::guesses);
}
