#include "tests/conformance/runner.h"

#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "prism/compiler/compile.h"
#include "prism/core/error.h"
#include "tests/conformance/node_context.h"
#include "tests/conformance/onnx_proto.h"

namespace prism::conformance {
namespace {

namespace fs = std::filesystem;

// Runs one node: every present, non-empty input becomes an input of the trace; empty ones
// (a zero-length axes list, say) are baked in as constants.
std::vector<HostBuffer> run_node(const OpBuilder& build, NodeContext& ctx) {
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
  return run(fn, args);
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

void print_value(const onnx::Node& node, const std::string& name, const HostBuffer& v) {
  std::vector<double> x = v.to_f64();
  x.resize(std::min<size_t>(x.size(), 8));
  fmt::print(stderr, "{} -> {} {}: {}\n", node.op_type, name, v.shape().str(), fmt::join(x, " "));
}

HostBuffer load_tensor(const fs::path& path) {
  return to_host_buffer(onnx::parse_tensor(onnx::read_file(path.string())));
}

}  // namespace

CaseResult run_case(const std::string& dir, bool trace) {
  onnx::Model model = onnx::parse_model(onnx::read_file((fs::path(dir) / "model.onnx").string()));
  const onnx::Graph& graph = model.graph;
  // Check that every op is known before reading data, so skips name the op.
  for (const onnx::Node& node : graph.nodes) {
    if (!node.domain.empty() && node.domain != "ai.onnx") {
      unsupported("op {} of domain \"{}\" is not an ONNX op", node.op_type, node.domain);
    }
    if (!op_table().contains(node.op_type)) unsupported("op {} has no prism mapping", node.op_type);
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
      values[fed[i]->name] = load_tensor(data / fmt::format("input_{}.pb", i));
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
      std::vector<HostBuffer> outputs = run_node(op_table().find(node.op_type)->second, ctx);
      for (size_t i = 0; i < node.outputs.size(); ++i) {
        if (node.outputs[i].empty()) continue;
        values[node.outputs[i]] = outputs[i];
        if (trace) print_value(node, node.outputs[i], outputs[i]);
      }
    }
    for (size_t i = 0; i < graph.outputs.size(); ++i) {
      HostBuffer want = load_tensor(data / fmt::format("output_{}.pb", i));
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
