// prism's Python module, `prism._prism` (nanobind): the platforms, tokenizers and chat templates,
// and language models, over the same C++ the `prism` command runs. The Python package
// (python/prism/) wraps it into the documented API (docs/python.md); this file only binds.
//
// - prism::Error becomes prism.Error (a RuntimeError) with the same one-line message.
// - The GIL is released while prism computes (loading, feeding tokens, sampling), so other
//   Python threads run meanwhile.
#include <nanobind/nanobind.h>
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
#include "prism/llm/chat_template.h"
#include "prism/llm/engine.h"
#include "prism/llm/gguf_model.h"
#include "prism/llm/sampler.h"
#include "prism/llm/tokenizer.h"

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

// A language model: an engine (weights, states), its tokenizer and chat template when it has
// them, and one conversation that each generation starts afresh.
class Model {
 public:
  Model(const std::string& uri, const std::string& platform, const std::string& dtype,
        int64_t seqlen) {
    llm::EngineOptions options;
    options.seqlen = seqlen;
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

 private:
  std::unique_ptr<llm::Engine> engine_;
  std::optional<llm::Tokenizer> tokenizer_;
  std::optional<llm::ChatTemplate> chat_;
};

// One generation, token by token: next() returns the next id and the text it completes (a
// whole number of UTF-8 characters, possibly empty), then, at the end (an end-of-sequence id, a
// stop string, max_tokens, or a full cache), any text still pending with no id, then None.
class Generation {
 public:
  using Step = std::optional<std::pair<std::optional<int32_t>, std::string>>;

  Generation(Model& model, std::vector<int32_t> prompt, const llm::SamplerOptions& sampling,
             int64_t max_tokens, std::vector<std::string> stop)
      : model_(model),
        prompt_(std::move(prompt)),
        sampler_(sampling),
        max_tokens_(max_tokens),
        stop_(std::move(stop)) {
    PRISM_CHECK(max_tokens >= 0, "prism.llm: max_tokens must be >= 0, got {}", max_tokens);
    PRISM_CHECK(!prompt_.empty(), "prism.llm: the prompt is empty");
    const int64_t vocab = model.engine().info().vocab_size;
    for (int32_t id : prompt_) {
      PRISM_CHECK(id >= 0 && id < vocab, "prism.llm: token id {} is outside the vocabulary of {}",
                  id, vocab);
    }
    if (model.has_tokenizer()) detok_.emplace(model.tokenizer(), true);
  }

  Step next() {
    if (done_) return std::nullopt;
    llm::Engine& engine = model_.engine();
    // As `prism llm` does: feed the prompt, or the last token; stop before a feed that would
    // not fit the cache.
    if (started_ && (generated_ == max_tokens_ || engine.position() >= engine.seqlen()))
      return finish();
    int32_t id;
    {
      nb::gil_scoped_release release;
      if (!started_) {
        engine.reset();
        PRISM_CHECK(static_cast<int64_t>(prompt_.size()) <= engine.seqlen(),
                    "prism.llm: the prompt's {} tokens do not fit the model's seqlen of {}",
                    prompt_.size(), engine.seqlen());
        logits_ = engine.feed(prompt_);
        history_ = prompt_;
        started_ = true;
      } else {
        const int32_t last[] = {history_.back()};
        logits_ = engine.feed(last);
      }
      if (max_tokens_ == 0) return finish();
      id = sampler_.next(logits_, history_);
    }
    const auto& eos = engine.info().eos_token_ids;
    if (std::find(eos.begin(), eos.end(), id) != eos.end()) return finish();
    history_.push_back(id);
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

 private:
  Step finish() {
    done_ = true;
    std::string rest = detok_ ? detok_->finish() : std::string();
    if (rest.empty()) return std::nullopt;
    return std::pair(std::optional<int32_t>(), std::move(rest));
  }

  Model& model_;
  std::vector<int32_t> prompt_, history_;
  llm::Sampler sampler_;
  int64_t max_tokens_, generated_ = 0;
  std::vector<std::string> stop_;
  std::optional<llm::StreamingDetokenizer> detok_;
  std::vector<float> logits_;
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
             const std::string& dtype, int64_t seqlen) {
            nb::gil_scoped_release release;
            new (self) Model(uri, platform, dtype, seqlen);
          },
          "uri"_a, "platform"_a = "", "dtype"_a = "auto", "seqlen"_a = 4096)
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
             double top_p, double min_p, double repetition_penalty, uint64_t seed,
             int64_t max_tokens, std::vector<std::string> stop) {
            llm::SamplerOptions s;
            s.temperature = temperature;
            s.top_k = top_k;
            s.top_p = top_p;
            s.min_p = min_p;
            s.repetition_penalty = repetition_penalty;
            s.seed = seed;
            return new Generation(model, std::move(prompt), s, max_tokens, std::move(stop));
          },
          nb::keep_alive<0, 1>(), "prompt"_a, "temperature"_a, "top_k"_a, "top_p"_a, "min_p"_a,
          "repetition_penalty"_a, "seed"_a, "max_tokens"_a, "stop"_a);

  nb::class_<Generation>(m, "Generation")
      .def("next", &Generation::next)
      .def_prop_ro("stopped", &Generation::stopped);
}
