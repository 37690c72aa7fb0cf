#include "prism/runtime/compile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "prism/compiler/passes.h"
#include "prism/core/error.h"
#include "prism/tensor/tracer.h"

namespace prism {
namespace {

int debug_level() {
  static const int level = [] {
    const char* v = std::getenv("PRISM_DEBUG");
    return v ? std::atoi(v) : 0;
  }();
  return level;
}

void debug_print(const char* stage, const ir::Graph& g) {
  if (debug_level() >= 1) std::fprintf(stderr, "--- %s\n%s", stage, ir::print(g).c_str());
}

}  // namespace

ir::Graph trace(const TraceFn& fn, std::span<const Shape> inputs) {
  Tracer tracer;
  std::vector<Tensor> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    args.push_back(tracer.input(static_cast<int>(i), inputs[i]));
  }
  std::vector<Tensor> outputs = fn(args);
  PRISM_CHECK(!outputs.empty(), "compile: the function returned no tensors");
  for (const Tensor& t : outputs) tracer.graph().outputs().push_back(tracer.use(t, "output"));
  return std::move(tracer.graph());
}

ir::Graph optimize(ir::Graph graph, const Platform& platform) {
  debug_print("traced", graph);
  compiler::verify(graph);
  graph = compiler::decompose(graph, [&](const ir::Node& n) { return platform.supports(n); });
  graph = compiler::legalize(graph);
  graph = compiler::simplify(graph);
  compiler::verify(graph);
  debug_print("optimized", graph);
  return graph;
}

size_t CompileCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

void CompileCache::clear() {
  std::lock_guard lock(mutex_);
  entries_.clear();
}

std::optional<Executable> CompileCache::find(Platform& platform, uint64_t hash,
                                             const ir::Graph& traced,
                                             const std::vector<int>& donate) {
  std::lock_guard lock(mutex_);
  auto [begin, end] = entries_.equal_range(hash);
  for (auto it = begin; it != end; ++it) {
    Entry& e = it->second;
    if (e.platform == &platform && e.donate == donate && e.traced == traced) {
      e.last_use = ++uses_;
      return Executable(platform, e.impl, e.graph);
    }
  }
  return std::nullopt;
}

void CompileCache::insert(uint64_t hash, Entry entry) {
  std::lock_guard lock(mutex_);
  entry.last_use = ++uses_;
  entries_.emplace(hash, std::move(entry));
  if (capacity_ > 0 && entries_.size() > capacity_) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(), [](auto& a, auto& b) {
      return a.second.last_use < b.second.last_use;
    });
    entries_.erase(oldest);
  }
}

Executable compile(Platform& platform, const TraceFn& fn, std::vector<Shape> inputs,
                   const CompileOptions& options) {
  return compile_graph(platform, trace(fn, inputs), options);
}

Executable compile_graph(Platform& platform, ir::Graph traced, const CompileOptions& options) {
  const size_t inputs = traced.inputs().size();
  for (int d : options.donate) {
    PRISM_CHECK(d >= 0 && d < static_cast<int>(inputs),
                "compile: donated input {} out of range ({} inputs)", d, inputs);
  }
  CompileCache* cache = options.cache;
  const uint64_t hash = cache ? traced.hash() : 0;
  if (cache) {
    if (auto found = cache->find(platform, hash, traced, options.donate)) return *found;
  }
  std::optional<ir::Graph> kept;
  if (cache) kept = traced;  // the cache compares the traced graph, before the passes
  auto graph = std::make_shared<const ir::Graph>(optimize(std::move(traced), platform));
  std::shared_ptr<ExecutableImpl> impl = platform.compile(*graph, CompileSpec{options.donate});
  if (cache) {
    cache->insert(hash, {&platform, std::move(*kept), options.donate, impl, graph, 0});
  }
  return Executable(platform, impl, graph);
}

Executable::Executable(Platform& platform, std::shared_ptr<ExecutableImpl> impl,
                       std::shared_ptr<const ir::Graph> graph)
    : platform_(&platform), impl_(std::move(impl)), graph_(std::move(graph)) {
  for (ir::ValueId id : graph_->parameters()) {
    const ir::Node& n = graph_->node(id);
    parameters_.push_back({n.attr<ir::ParameterAttrs>().name, n.shape});
  }
  for (ir::ValueId id : graph_->inputs()) inputs_.push_back(graph_->node(id).shape);
  for (ir::ValueId id : graph_->outputs()) outputs_.push_back(graph_->node(id).shape);
}

std::vector<Buffer> Executable::call(std::span<const Buffer> params,
                                     std::span<const Buffer> inputs) const {
  PRISM_CHECK(params.size() == parameters_.size(), "call: {} parameters given, {} expected",
              params.size(), parameters_.size());
  PRISM_CHECK(inputs.size() == inputs_.size(), "call: {} inputs given, {} expected", inputs.size(),
              inputs_.size());
  for (size_t i = 0; i < params.size(); ++i) {
    PRISM_CHECK(params[i].valid() && params[i].shape().dtype() == parameters_[i].shape.dtype() &&
                    params[i].shape().sizes() == parameters_[i].shape.sizes(),
                "call: parameter \"{}\" is {} but the executable expects {}", parameters_[i].name,
                params[i].valid() ? params[i].shape().str() : "missing",
                parameters_[i].shape.str());
    PRISM_CHECK(&params[i].platform() == platform_, "call: parameter \"{}\" lives on {}, not {}",
                parameters_[i].name, params[i].platform().name(), platform_->name());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    PRISM_CHECK(inputs[i].valid() && inputs[i].shape().dtype() == inputs_[i].dtype() &&
                    inputs[i].shape().sizes() == inputs_[i].sizes(),
                "call: input {} is {} but the executable expects {}", i,
                inputs[i].valid() ? inputs[i].shape().str() : "missing", inputs_[i].str());
    PRISM_CHECK(&inputs[i].platform() == platform_, "call: input {} lives on {}, not {}", i,
                inputs[i].platform().name(), platform_->name());
  }
  return impl_->call(params, inputs);
}

namespace {

// `what`: the caller, for the error.
std::vector<Buffer> by_position(std::string_view what,
                                const std::vector<Executable::Parameter>& parameters,
                                const std::map<std::string, Buffer, std::less<>>& params) {
  std::vector<Buffer> ordered;
  for (const Executable::Parameter& p : parameters) {
    auto it = params.find(p.name);
    PRISM_CHECK(it != params.end(), "{}: no buffer for parameter \"{}\" ({})", what, p.name,
                p.shape.str());
    ordered.push_back(it->second);
  }
  return ordered;
}

}  // namespace

std::vector<Buffer> Executable::call(const std::map<std::string, Buffer, std::less<>>& params,
                                     std::span<const Buffer> inputs) const {
  return call(by_position("call", parameters_, params), inputs);
}

std::map<std::string, Buffer, std::less<>> Executable::prepare(
    std::map<std::string, Buffer, std::less<>> params) const {
  std::vector<Buffer> ordered = by_position("prepare", parameters_, params);
  for (size_t i = 0; i < ordered.size(); ++i) {
    PRISM_CHECK(ordered[i].shape().sizes() == parameters_[i].shape.sizes() &&
                    ordered[i].shape().dtype() == parameters_[i].shape.dtype() &&
                    &ordered[i].platform() == platform_,
                "prepare: parameter \"{}\" is not the executable's {} on {}", parameters_[i].name,
                parameters_[i].shape.str(), platform_->name());
    params.erase(parameters_[i].name);  // held once, so the platform may lay it out in place
  }
  std::vector<Buffer> prepared = impl_->prepare(std::move(ordered));
  PRISM_CHECK(prepared.size() == parameters_.size(),
              "prepare: the platform returned {} of {} buffers", prepared.size(),
              parameters_.size());
  for (size_t i = 0; i < prepared.size(); ++i) {
    params.emplace(parameters_[i].name, std::move(prepared[i]));
  }
  return params;
}

}  // namespace prism
