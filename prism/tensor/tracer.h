// Tracer: the graph being recorded. A Tracer is current on its thread from construction to
// destruction (scoped, never global), so two models can be traced at once on two threads.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>

#include "prism/ir/graph.h"
#include "prism/tensor/tensor.h"

namespace prism {

class Tracer {
 public:
  Tracer();
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // The innermost tracer of this thread; `op` names the caller in the error when there is none.
  static Tracer& current(std::string_view op);
  static bool active();

  ir::Graph& graph() { return graph_; }
  uint64_t id() const { return id_; }

  Tensor input(int index, const Shape& shape);
  ir::ValueId parameter(const ir::ParameterAttrs& parameter, const Shape& shape);
  // A Tensor for a node already in this graph.
  Tensor wrap(ir::ValueId id);
  // The value of `t` in this graph; `op` names the caller in errors.
  ir::ValueId use(const Tensor& t, std::string_view op);

 private:
  ir::Graph graph_;
  uint64_t id_;
  Tracer* previous_;
  std::unordered_map<std::string, ir::ValueId> parameters_;
};

// Fails naming `op` unless x is floating point: the check of the float-only ops.
void require_float(std::string_view op, const Tensor& x);

}  // namespace prism
