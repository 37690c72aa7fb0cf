#include "tests/conformance/runner.h"

#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "prism/backends/registry.h"
#include "prism/core/error.h"
#include "prism/runtime/compile.h"
#include "tests/conformance/node_context.h"
#include "tests/conformance/onnx_proto.h"

namespace prism::conformance {
namespace {

namespace fs = std::filesystem;

// Runs one node: every present, non-empty input becomes an input of the trace; empty ones
// (a zero-length axes list, say) are baked in as constants.
std::vector<HostBuffer> run_node(const OpBuilder& build, NodeContext& ctx, Platform& platform) {
  std::vector<HostBuffer> args;
  std::vector<int> arg_of_input(ctx.num_inputs(), -1);
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i) || ctx.value(i).numel() == 0) continue;
    arg_of_input[i] = static_cast<int>(args.size());
    args.push_back(ctx.value(i));
  }
  TraceFn fn = [&](std::span<const Tensor> in) {
    std::vector<Tensor> traced(ctx.num_inputs());
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (arg_of_input[i] >= 0) {
        traced[i] = in[arg_of_input[i]];
      } else if (ctx.has_input(i)) {
        traced[i] = Tensor::constant(ctx.value(i));
      }
    }
    ctx.set_traced(std::move(traced));
    std::vector<Tensor> outputs = build(ctx);
    PRISM_CHECK(static_cast<int>(outputs.size()) >= ctx.num_outputs(),
                "{}: the builder made {} outputs for {}", ctx.op(), outputs.size(),
                ctx.num_outputs());
    outputs.resize(ctx.num_outputs());
    return outputs;
  };
  return run(fn, args, &platform);
}

Tolerance tolerance_for(DType t) {
  if (t == DType::f16) return kF16Tolerance;
  if (t == DType::bf16) return kBF16Tolerance;
  return kF32Tolerance;
}

// "" when `got` matches `want`, else the first mismatch.
std::string compare(const HostBuffer& got, const HostBuffer& want) {
  if (got.dtype() != want.dtype()) {
    return fmt::format("dtype {} but expected {}", name(got.dtype()), name(want.dtype()));
  }
  if (got.shape().sizes() != want.shape().sizes()) {
    return fmt::format("shape {} but expected {}", got.shape().dims_str(), want.shape().dims_str());
  }
  if (!is_float(want.dtype())) {
    if (std::memcmp(got.data(), want.data(), got.size_bytes()) == 0) return "";
  }
  std::vector<double> g = got.to_f64(), w = want.to_f64();
  Tolerance tol = tolerance_for(want.dtype());
  int64_t mismatches = 0, first = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (std::isnan(w[i]) || std::isinf(w[i])) {
      ok = std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i];
    } else if (is_float(want.dtype())) {
      ok = std::abs(g[i] - w[i]) <= tol.atol + tol.rtol * std::abs(w[i]);
    } else {
      ok = g[i] == w[i];
    }
    if (!ok && mismatches++ == 0) first = static_cast<int64_t>(i);
  }
  if (mismatches == 0) return "";
  return fmt::format("{} of {} values differ; first at flat index {}: got {} expected {}",
                     mismatches, g.size(), first, g[first], w[first]);
}

void print_value(std::string_view producer, const std::string& name, const HostBuffer& v) {
  std::vector<double> x = v.to_f64();
  x.resize(std::min<size_t>(x.size(), 8));
  fmt::print(stderr, "{} -> {} {}: {}\n", producer, name, v.shape().str(), fmt::join(x, " "));
}

// Reads a data file for a graph input or output declared as `declared`. Older test data
// stores bfloat16 values as their uint16 bit patterns; the declared type says what they are.
HostBuffer load_tensor(const fs::path& path, onnx::ElemType declared) {
  onnx::TensorProto t = onnx::parse_tensor(onnx::read_file(path.string()));
  if (declared == onnx::ElemType::bfloat16 && t.type == onnx::ElemType::uint16) t.type = declared;
  return to_host_buffer(t);
}

// Ops that prism's tensor API cannot express, and why (other unmapped ops are reported as
// such).
const std::map<std::string, std::string, std::less<>> kInexpressible = {
    {"NonZero", "its output shape depends on the input values"},
    {"Unique", "its output shape depends on the input values"},
    {"NonMaxSuppression", "its output shape depends on the input values"},
    {"If", "control flow (subgraphs) is not traced"},
    {"Loop", "control flow (subgraphs) is not traced"},
    {"Scan", "control flow (subgraphs) is not traced"},
    {"SequenceInsert", "sequences are not tensors"},
    {"SequenceLength", "sequences are not tensors"},
    {"SequenceMap", "sequences are not tensors"},
    {"OptionalHasElement", "optionals are not tensors"},
    {"OptionalGetElement", "optionals are not tensors"},
    {"StringNormalizer", "prism has no string type"},
    {"Bernoulli", "it draws random numbers"},
    {"RandomUniformLike", "it draws random numbers"},
    {"RandomNormalLike", "it draws random numbers"},
};

// Cases whose expected data does not follow from their model; each says why.
const std::map<std::string, std::string, std::less<>> kInconsistentData = {
    {"test_adam_multiple",
     "expected data was computed with epsilon 1e-2, which the node does not carry (the default "
     "is 0)"},
};

}  // namespace

CaseResult run_case(const std::string& dir, Platform& platform, bool trace) {
  auto known_bad = kInconsistentData.find(fs::path(dir).filename().string());
  if (known_bad != kInconsistentData.end()) unsupported("{}", known_bad->second);
  onnx::Model model = onnx::parse_model(onnx::read_file((fs::path(dir) / "model.onnx").string()));
  const onnx::Graph& graph = model.graph;
  // Check that every op is known before reading data, so skips name the op.
  for (const onnx::Node& node : graph.nodes) {
    auto inexpressible = kInexpressible.find(node.op_type);
    if (inexpressible != kInexpressible.end()) {
      unsupported("op {}: {}", node.op_type, inexpressible->second);
    }
    if (!find_builder(node)) {
      bool default_domain = node.domain.empty() || node.domain == "ai.onnx";
      unsupported("op {}{} has no prism mapping", default_domain ? "" : node.domain + ".",
                  node.op_type);
    }
  }
  std::map<std::string, HostBuffer, std::less<>> env;
  for (const onnx::TensorProto& t : graph.initializers) env[t.name] = to_host_buffer(t);
  std::vector<const onnx::ValueInfo*> fed;  // graph inputs that the data files provide
  for (const onnx::ValueInfo& in : graph.inputs) {
    if (!env.contains(in.name)) fed.push_back(&in);
  }
  for (const onnx::ValueInfo* in : fed) {
    if (!in->is_tensor)
      unsupported("input \"{}\" is not a tensor (sequence or optional)", in->name);
  }
  for (const onnx::ValueInfo& out : graph.outputs) {
    if (!out.is_tensor)
      unsupported("output \"{}\" is not a tensor (sequence or optional)", out.name);
  }

  CaseResult result;
  int sets = 0;
  for (int set = 0;; ++set) {
    fs::path data = fs::path(dir) / fmt::format("test_data_set_{}", set);
    if (!fs::is_directory(data)) break;
    ++sets;
    auto values = env;
    for (size_t i = 0; i < fed.size(); ++i) {
      HostBuffer v = load_tensor(data / fmt::format("input_{}.pb", i), fed[i]->elem_type);
      if (trace) print_value("input", fed[i]->name, v);
      values[fed[i]->name] = v;
    }
    for (const onnx::Node& node : graph.nodes) {
      std::vector<std::optional<HostBuffer>> inputs;
      for (const std::string& name : node.inputs) {
        if (name.empty()) {
          inputs.emplace_back();
          continue;
        }
        auto it = values.find(name);
        PRISM_CHECK(it != values.end(), "{}: input \"{}\" is not defined", node.op_type, name);
        inputs.emplace_back(it->second);
      }
      NodeContext ctx(node, model.opset, std::move(inputs));
      std::vector<HostBuffer> outputs = run_node(*find_builder(node), ctx, platform);
      for (size_t i = 0; i < node.outputs.size(); ++i) {
        if (node.outputs[i].empty()) continue;
        values[node.outputs[i]] = outputs[i];
        if (trace) print_value(node.op_type, node.outputs[i], outputs[i]);
      }
    }
    for (size_t i = 0; i < graph.outputs.size(); ++i) {
      HostBuffer want =
          load_tensor(data / fmt::format("output_{}.pb", i), graph.outputs[i].elem_type);
      auto it = values.find(graph.outputs[i].name);
      PRISM_CHECK(it != values.end(), "output \"{}\" was not computed", graph.outputs[i].name);
      std::string diff = compare(it->second, want);
      if (!diff.empty()) {
        result.status = CaseResult::Status::failed;
        result.detail = fmt::format("output {} (\"{}\"): {}", i, graph.outputs[i].name, diff);
        return result;
      }
    }
  }
  PRISM_CHECK(sets > 0, "{} has no test_data_set_0", dir);
  return result;
}

}  // namespace prism::conformance
