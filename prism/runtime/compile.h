// prism::compile: trace a function of Tensors once, optimize the graph, hand it to a platform.
//
//   auto exe = prism::compile(platform, [](Tensor x, Tensor w) { return x.dot(w, "d"); },
//                             {Shape(DType::f32, {{"s", 7}, {"d", 64}}), ...});
//   std::vector<Buffer> out = exe.call(params, inputs);
//
// A compile traces, optimizes and hands the graph to the platform every time, unless the
// caller passes a CompileCache: its owner (an llm::Engine, a server, a test) keeps the programs
// it compiled, and they are freed with it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "prism/runtime/platform.h"
#include "prism/tensor/tensor.h"

namespace prism {

using TraceFn = std::function<std::vector<Tensor>(std::span<const Tensor>)>;

class CompileCache;

struct CompileOptions {
  std::vector<int> donate;  // inputs updated in place (a KV cache): do not reuse them after call
  // Where to look for the program before compiling it, and to keep it after; none: compile.
  CompileCache* cache = nullptr;
};

class Executable {
 public:
  struct Parameter {
    std::string name;
    Shape shape;
  };

  Executable(Platform& platform, std::shared_ptr<ExecutableImpl> impl,
             std::shared_ptr<const ir::Graph> graph);

  Platform& platform() const { return *platform_; }
  const ir::Graph& graph() const { return *graph_; }
  const std::vector<Parameter>& parameters() const { return parameters_; }
  const std::vector<Shape>& input_shapes() const { return inputs_; }
  const std::vector<Shape>& output_shapes() const { return outputs_; }

  // `params` in the order of parameters(); checks every shape.
  std::vector<Buffer> call(std::span<const Buffer> params, std::span<const Buffer> inputs) const;
  // Parameters by name.
  std::vector<Buffer> call(const std::map<std::string, Buffer, std::less<>>& params,
                           std::span<const Buffer> inputs) const;

  // The parameters in the layout the platform reads fastest, by name: each the buffer given,
  // or a copy laid out anew (the CPU keeps the weights of products blocked). Use those from
  // then on, with this executable and any other that reads them alike; the buffers given are
  // not changed, and whatever reads the new ones from outside (download, write) sees them as
  // they were stored.
  // Buffers held only by `params` (moved in) may be laid out in place, without a copy.
  std::map<std::string, Buffer, std::less<>> prepare(
      std::map<std::string, Buffer, std::less<>> params) const;

 private:
  Platform* platform_;
  std::shared_ptr<ExecutableImpl> impl_;
  std::shared_ptr<const ir::Graph> graph_;
  std::vector<Parameter> parameters_;
  std::vector<Shape> inputs_, outputs_;
};

// Compiled programs, owned by whoever holds the cache and freed with it. A program is found
// again when its traced graph is equal, node for node, to one compiled before for the same
// platform and donated inputs (the graph's hash only picks the bucket). Thread-safe.
class CompileCache {
 public:
  // `capacity`: the most programs kept, the least recently used dropped first; 0: no limit.
  explicit CompileCache(size_t capacity = 0) : capacity_(capacity) {}
  CompileCache(const CompileCache&) = delete;
  CompileCache& operator=(const CompileCache&) = delete;

  size_t size() const;
  // Drops every program (executables handed out keep theirs alive until they go).
  void clear();

 private:
  friend Executable compile_graph(Platform&, ir::Graph, const CompileOptions&);
  struct Entry {
    Platform* platform;
    ir::Graph traced;
    std::vector<int> donate;
    std::shared_ptr<ExecutableImpl> impl;
    std::shared_ptr<const ir::Graph> graph;
    uint64_t last_use;
  };
  std::optional<Executable> find(Platform& platform, uint64_t hash, const ir::Graph& traced,
                                 const std::vector<int>& donate);
  void insert(uint64_t hash, Entry entry);

  mutable std::mutex mutex_;
  size_t capacity_;
  uint64_t uses_ = 0;
  std::unordered_multimap<uint64_t, Entry> entries_;
};

// Records fn applied to symbolic inputs of the given shapes.
ir::Graph trace(const TraceFn& fn, std::span<const Shape> inputs);
// The compiler's passes for `platform`: verify, decompose unsupported composites, simplify.
ir::Graph optimize(ir::Graph graph, const Platform& platform);

Executable compile(Platform& platform, const TraceFn& fn, std::vector<Shape> inputs,
                   const CompileOptions& options = {});
// The same for a graph already traced (a partitioned one: prism/runtime/sharded.h).
Executable compile_graph(Platform& platform, ir::Graph traced, const CompileOptions& options = {});

namespace detail {

inline std::vector<Tensor> as_outputs(Tensor t) { return {std::move(t)}; }
inline std::vector<Tensor> as_outputs(std::vector<Tensor> v) { return v; }
template <typename... T>
std::vector<Tensor> as_outputs(std::tuple<T...> t) {
  return std::apply([](auto&&... x) { return std::vector<Tensor>{x...}; }, std::move(t));
}
template <typename A, typename B>
std::vector<Tensor> as_outputs(std::pair<A, B> p) {
  return {std::move(p.first), std::move(p.second)};
}

template <typename F, size_t... I>
TraceFn adapt(F&& fn, std::index_sequence<I...>) {
  return
      [fn = std::forward<F>(fn)](std::span<const Tensor> in) { return as_outputs(fn(in[I]...)); };
}

template <typename F, size_t N>
constexpr bool invocable_with_n() {
  return []<size_t... I>(std::index_sequence<I...>) {
    return std::is_invocable_v<F, decltype((void)I, std::declval<Tensor>())...>;
  }
  (std::make_index_sequence<N>{});
}

}  // namespace detail

namespace detail {
// A TraceFn calling `fn` with `arity` Tensors (arity <= 8).
template <typename F>
TraceFn to_trace_fn(F&& fn, size_t arity) {
  TraceFn traced;
  auto try_arity = [&]<size_t N>(std::integral_constant<size_t, N>) {
    if constexpr (invocable_with_n<F, N>()) {
      if (arity == N) traced = adapt(fn, std::make_index_sequence<N>{});
    }
  };
  [&]<size_t... N>(std::index_sequence<N...>) {
    (try_arity(std::integral_constant<size_t, N>{}), ...);
  }
  (std::make_index_sequence<9>{});
  if (!traced) throw Error("compile: the function's arity does not match the input shapes");
  return traced;
}
}  // namespace detail

// Accepts a callable taking N Tensors (N = inputs.size() <= 8) and returning a Tensor, a
// std::vector<Tensor>, a pair or a tuple of Tensors.
template <typename F>
requires(!std::is_convertible_v<F, TraceFn>) Executable
    compile(Platform& platform, F&& fn, std::vector<Shape> inputs,
            const CompileOptions& options = {}) {
  TraceFn traced = detail::to_trace_fn(std::forward<F>(fn), inputs.size());
  return compile(platform, traced, std::move(inputs), options);
}

}  // namespace prism
