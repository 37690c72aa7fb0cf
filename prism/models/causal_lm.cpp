#include "prism/models/causal_lm.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "prism/core/error.h"
#include "prism/models/lfm2.h"
#include "prism/models/llama.h"
#include "prism/models/qwen3_5.h"

namespace prism::models {
namespace {

using Factory = std::unique_ptr<CausalLM> (*)(const nlohmann::json&, std::string_view, DType);

struct Architecture {
  const char* model_type;
  Factory make;
};

// One line per architecture: config.json's model_type and the model's factory.
constexpr Architecture kArchitectures[] = {
    {"llama", make_llama},
    {"qwen3_5", make_qwen3_5},
    {"qwen3_5_text", make_qwen3_5},  // a text-only Qwen3_5ForCausalLM checkpoint
    {"lfm2", make_lfm2},
};

}  // namespace

void ModelInfo::add_eos_token_ids(const nlohmann::json& value) {
  auto add = [&](int64_t id) {
    if (std::find(eos_token_ids.begin(), eos_token_ids.end(), id) == eos_token_ids.end()) {
      eos_token_ids.push_back(id);
    }
  };
  if (value.is_array()) {
    for (const auto& id : value) {
      PRISM_CHECK(id.is_number_integer(), "llm: eos_token_id lists {}, which is not a token id",
                  id.dump());
      add(id.get<int64_t>());
    }
  } else if (value.is_number_integer()) {  // null or absent: no eos id
    add(value.get<int64_t>());
  }
}

void ModelInfo::read_special_ids(const nlohmann::json& config) {
  if (config.contains("eos_token_id")) add_eos_token_ids(config["eos_token_id"]);
  if (config.contains("bos_token_id") && config["bos_token_id"].is_number_integer()) {
    bos_token_id = config["bos_token_id"].get<int64_t>();
  }
}

std::vector<std::string> supported_model_types() {
  std::vector<std::string> types;
  for (const Architecture& a : kArchitectures) types.emplace_back(a.model_type);
  return types;
}

std::unique_ptr<CausalLM> make_causal_lm(const nlohmann::json& config, std::string_view source,
                                         DType dtype) {
  PRISM_CHECK(config.is_object(), "llm: {} is not a JSON object", source);
  // A number past int64's range cannot be read as an integer (converting it would be undefined
  // behaviour; found by fuzz/fuzz_config): none belongs in a config.
  std::function<void(const nlohmann::json&)> check_numbers = [&](const nlohmann::json& j) {
    if (j.is_number_float() && !(std::fabs(j.get<double>()) < 9.2233720368547758e18)) {
      fail("llm: {}: the number {} is out of range", source, j.dump());
    }
    if (j.is_structured()) {
      for (const auto& item : j) check_numbers(item);
    }
  };
  check_numbers(config);
  // A model's layers are listed one by one as the config is read (their kinds) and traced one
  // by one: a layer count past any model's (the largest published have a few hundred) is a
  // broken config, not a model (fuzz/fuzz_config: 777777777777777773 layers ran out of memory).
  constexpr int64_t kMostLayers = 10000;
  for (const nlohmann::json* c :
       {&config, config.contains("text_config") ? &config["text_config"] : nullptr}) {
    if (!c || !c->is_object() || !c->contains("num_hidden_layers")) continue;
    const nlohmann::json& n = (*c)["num_hidden_layers"];
    if (n.is_number() && n.get<double>() > kMostLayers) {
      fail("llm: {}: num_hidden_layers is {}; prism takes at most {}", source, n.dump(),
           kMostLayers);
    }
  }
  std::string type = config.contains("model_type") && config["model_type"].is_string()
                         ? config["model_type"].get<std::string>()
                         : "(none)";
  for (const Architecture& a : kArchitectures) {
    if (type != a.model_type) continue;
    try {
      return a.make(config, source, dtype);
    } catch (const nlohmann::json::exception& e) {  // a value of the wrong type
      fail("llm: {}: {}", source, e.what());
    }
  }
  fail("llm: {} has model_type \"{}\"; supported: {}", source, type,
       fmt::join(supported_model_types(), ", "));
}

void CausalLM::use_draft_head() {
  fail("llm: this {} checkpoint has no multi-token prediction head (--speculate=mtp)",
       info().model_type);
}

std::vector<Tensor> CausalLM::draft_step(const Tensor&, const Tensor&,
                                         std::span<const Tensor>) const {
  fail("llm: {} runs no draft head", info().model_type);
}

Tensor CausalLM::head_rows(const Tensor& x, const Tensor& last, Logits which) {
  return which == Logits::last ? x.dynamic_slice("s", last, 1) : x;
}

Tensor CausalLM::logits_output(const Tensor& logits, Logits which) {
  const Tensor out = which == Logits::last
                         ? logits.reshape(Shape(logits.dtype(), {{"voc", logits.size("voc")}}))
                         : logits;
  return out.convert(DType::f32);
}

Tensor CausalLM::parameter(const std::string& name, const Shape& shape,
                           const Sharding& sharding) const {
  auto it = quantized_.find(name);
  if (it == quantized_.end()) return Tensor::parameter(name, shape, sharding);
  const quant::GgmlTypeInfo& t = quant::info(it->second);
  PRISM_CHECK(shape.rank() == 2 && shape.size(1) % t.block_elements == 0,
              "{}: weight \"{}\" {} cannot be kept in {} blocks of {} values", info().model_type,
              name, shape.str(), t.name, t.block_elements);
  std::vector<Dim> dims(shape.dims().begin(), shape.dims().end());
  dims[1].size = shape.size(1) / t.block_elements * t.block_bytes;
  return Tensor::parameter(name, Shape(DType::u8, dims), sharding)
      .dequantize(it->second, shape.dtype());
}

Conversations::Conversations(const Tensor& positions) {
  for (int64_t i = 0; i < positions.size("b"); ++i) {
    at_.push_back(positions.slice("b", i, 1).reshape(Shape::scalar(positions.dtype())));
  }
}

Tensor Conversations::row(const Tensor& t, int64_t i, Tag as) {
  return t.slice("b", i, 1).rename({{"b", as}});
}

Tensor Conversations::join(const std::vector<Tensor>& rows) const {
  return rows.size() == 1 ? rows[0] : concat(rows, "b");
}

}  // namespace prism::models
