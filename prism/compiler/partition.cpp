#include "prism/compiler/partition.h"

#include <optional>
#include <set>

#include "prism/core/error.h"
#include "prism/tensor/tracer.h"

namespace prism::compiler {
namespace {

using ir::Node;
using ir::Op;
using ir::ValueId;

// A value of the local graph: its id there, how it is split, and the mesh axis over which its
// devices hold partial sums (-1: none).
struct Value {
  ValueId id = -1;
  Split split;
  int partial = -1;
};

bool any_split(const Split& s) {
  for (int a : s) {
    if (a >= 0) return true;
  }
  return false;
}

bool repeats_an_axis(const Split& s) {
  std::set<int> seen;
  for (int a : s) {
    if (a >= 0 && !seen.insert(a).second) return true;
  }
  return false;
}

class Partitioner {
 public:
  Partitioner(const ir::Graph& g, const Mesh& mesh, const std::vector<Split>& inputs,
              const std::vector<Split>& outputs)
      : g_(g), mesh_(mesh), inputs_(inputs), outputs_(outputs) {}

  Partitioned run() {
    map_.resize(g_.size());
    for (ValueId id = 0; id < g_.size(); ++id) map_[id] = node(id);
    for (size_t k = 0; k < g_.outputs().size(); ++k) {
      const ValueId out = g_.outputs()[k];
      Value v = reduce_partial(map_[out]);
      // An output asked for split some way (a state the next program reads as its input) is
      // brought to it: dims split otherwise gathered, dims it has whole cut to the block.
      if (k < outputs_.size() && !outputs_[k].empty() && v.split != outputs_[k]) {
        const Split& want = outputs_[k];
        std::optional<Value> o = to(out, v, want);
        if (!o) {
          for (int d = 0; d < static_cast<int>(want.size()); ++d) {
            if (v.split[d] >= 0 && v.split[d] != want[d]) v = gather_dim(v, d);
          }
          o = cut_out(v, want);
        }
        v = *o;
      }
      graph().outputs().push_back(v.id);
      result_.outputs.push_back(v.split);
    }
    result_.graph = std::move(graph());
    return std::move(result_);
  }

 private:
  int64_t devices(int axis) const { return mesh_.axes()[axis].size; }
  // The local graph, recorded by a tracer so that rules can write with the Tensor API.
  ir::Graph& graph() { return tracer_.graph(); }
  const ir::Graph& graph() const { return const_cast<Tracer&>(tracer_).graph(); }
  const Shape& local_of(const Value& v) const { return graph().node(v.id).shape; }

  Shape local(const Shape& global, const Split& split) const {
    return local_shape(global, split, mesh_);
  }

  Value add(Node node, Split split, int partial = -1) {
    ValueId id = graph().add(std::move(node));
    return {id, std::move(split), partial};
  }

  Value reduce_partial(Value v) {
    if (v.partial < 0) return v;
    Node n{
        Op::all_reduce, local_of(v), {v.id}, ir::CollectiveAttrs{v.partial, devices(v.partial), 0}};
    return add(std::move(n), v.split);
  }

  Value gather_dim(Value v, int dim) {
    const int axis = v.split[dim];
    if (axis < 0) return v;
    std::vector<Dim> dims(local_of(v).dims().begin(), local_of(v).dims().end());
    dims[dim].size *= devices(axis);
    Node n{Op::all_gather,
           Shape(local_of(v).dtype(), dims),
           {v.id},
           ir::CollectiveAttrs{axis, devices(axis), dim}};
    Split split = v.split;
    split[dim] = -1;
    return add(std::move(n), std::move(split), v.partial);
  }

  Value whole(Value v) {
    v = reduce_partial(v);
    for (int d = 0; d < static_cast<int>(v.split.size()); ++d) v = gather_dim(v, d);
    return v;
  }

  // The value of global `gid` (whose local value is `v`) split as `want`: gathers the dims
  // split otherwise, and re-makes a broadcast at the shard's size where `want` splits a dim `v`
  // has whole. Nullopt where a whole dim would have to be cut some other way.
  std::optional<Value> to(ValueId gid, Value v, const Split& want) {
    v = reduce_partial(v);
    bool cut = false;
    for (int d = 0; d < static_cast<int>(want.size()); ++d) {
      if (v.split[d] >= 0 && v.split[d] != want[d]) v = gather_dim(v, d);
      cut = cut || (want[d] >= 0 && v.split[d] < 0);
    }
    if (!cut) return v;
    const Node& gn = g_.node(gid);
    if (gn.op != Op::broadcast) return cut_out(v, want);
    const std::vector<int>& map = gn.attr<ir::AxesAttrs>().axes;  // operand axis -> out axis
    const Shape& operand = g_.node(gn.inputs[0]).shape;
    Split operand_want(operand.rank(), -1);
    for (int i = 0; i < operand.rank(); ++i) {
      if (operand.size(i) == gn.shape.size(map[i])) operand_want[i] = want[map[i]];
    }
    std::optional<Value> o = to(gn.inputs[0], map_[gn.inputs[0]], operand_want);
    if (!o) return std::nullopt;
    Split split = want;
    for (int i = 0; i < operand.rank(); ++i) {
      if (operand.size(i) != gn.shape.size(map[i])) split[map[i]] = want[map[i]];
    }
    return add(Node{Op::broadcast, local(gn.shape, split), {o->id}, gn.attrs}, split);
  }

  // This device's coordinate along mesh axis `axis`, an i32 scalar.
  Tensor coordinate(int axis) {
    Node n{Op::mesh_coordinate,
           Shape::scalar(DType::i32),
           {},
           ir::CollectiveAttrs{axis, devices(axis), 0}};
    return tracer_.wrap(add(std::move(n), {}).id);
  }

  // `v`, whole along the dims `want` splits, cut down to this device's block of them.
  Value cut_out(Value v, const Split& want) {
    Tensor t = tracer_.wrap(v.id);
    Split split = v.split;
    for (int d = 0; d < static_cast<int>(want.size()); ++d) {
      if (want[d] < 0 || v.split[d] >= 0) continue;
      const int64_t block = local_of(v).size(d) / devices(want[d]);
      t = t.dynamic_slice(local_of(v).tag(d), coordinate(want[d]) * static_cast<double>(block),
                          block);
      split[d] = want[d];
    }
    return {tracer_.use(t, "partition"), split, v.partial};
  }

  // `n` over local operands with the output split as `split`.
  Value emit(const Node& n, const std::vector<ValueId>& operands, Split split, int partial = -1) {
    Node local_node = n;
    local_node.inputs = operands;
    local_node.shape = local(n.shape, split);
    return add(std::move(local_node), std::move(split), partial);
  }

  // Every operand whole, and so the result.
  Value replicated(ValueId id) {
    const Node& n = g_.node(id);
    std::vector<ValueId> operands;
    for (ValueId in : n.inputs) operands.push_back(whole(map_[in]).id);
    return emit(n, operands, Split(n.shape.rank(), -1));
  }

  // The operands split as `wants` (one per operand); nullopt when one cannot be.
  std::optional<std::vector<ValueId>> operands_as(const Node& n, const std::vector<Split>& wants) {
    std::vector<ValueId> ids;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      std::optional<Value> v = to(n.inputs[i], map_[n.inputs[i]], wants[i]);
      if (!v) return std::nullopt;
      ids.push_back(v->id);
    }
    return ids;
  }

  Value node(ValueId id) {
    const Node& n = g_.node(id);
    const int rank = n.shape.rank();
    switch (n.op) {
      case Op::parameter: {
        const auto& p = n.attr<ir::ParameterAttrs>();
        Split split = p.sharding.empty()
                          ? Split(rank, -1)
                          : Sharding::parse(p.sharding)
                                .resolve(n.shape, mesh_, "parameter \"" + p.name + "\"");
        drop_single_device_axes(split);
        result_.parameters[p.name] = split;
        Node local_node{Op::parameter, local(n.shape, split), {}, ir::ParameterAttrs{p.name, ""}};
        return add(std::move(local_node), split);
      }
      case Op::input: {
        const int index = n.attr<ir::InputAttrs>().index;
        Split split = index < static_cast<int>(inputs_.size()) && !inputs_[index].empty()
                          ? inputs_[index]
                          : Split(rank, -1);
        PRISM_CHECK(static_cast<int>(split.size()) == rank,
                    "partition: input {} is split over {} dims but has {}", index, split.size(),
                    rank);
        drop_single_device_axes(split);
        return emit(n, {}, split);
      }
      case Op::constant:
      case Op::iota:
        return emit(n, {}, Split(rank, -1));
      default:
        break;
    }
    if (ir::is_elementwise(n.op)) return elementwise(id);
    switch (n.op) {
      case Op::convert:
        return elementwise(id);
      case Op::broadcast: {
        Value v = reduce_partial(map_[n.inputs[0]]);
        const std::vector<int>& map = n.attr<ir::AxesAttrs>().axes;
        Split split(rank, -1);
        for (size_t i = 0; i < map.size(); ++i) split[map[i]] = v.split[i];
        return emit(n, {v.id}, split);
      }
      case Op::transpose: {
        Value v = map_[n.inputs[0]];
        const std::vector<int>& perm = n.attr<ir::AxesAttrs>().axes;
        Split split(rank, -1);
        for (int i = 0; i < rank; ++i) split[i] = v.split[perm[i]];
        return emit(n, {v.id}, split, v.partial);
      }
      case Op::reshape:
        return reshape(id);
      case Op::dot:
        return dot(id);
      case Op::reduce_sum:
      case Op::reduce_max:
      case Op::reduce_min:
      case Op::reduce_prod:
        return reduce(id);
      case Op::softmax:
      case Op::log_softmax:
        return along(id, {n.attr<ir::AxisAttrs>().axis});
      case Op::rms_norm:
      case Op::layer_norm:
        return along(id, n.attr<ir::NormAttrs>().axes);
      case Op::rope:
        return rope(id);
      case Op::attention:
        return attention(id);
      case Op::dynamic_update_slice:
        return update_slice(id);
      case Op::dynamic_slice:
      case Op::slice:
        return slice(id);
      case Op::concatenate:
        return concatenate(id);
      case Op::gather:
        return gather(id);
      case Op::short_conv:
        return short_conv(id);
      case Op::gated_delta_rule:
        return delta_rule(id);
      default:
        return replicated(id);
    }
  }

  void drop_single_device_axes(Split& split) const {
    for (int& a : split) {
      if (a >= 0 && devices(a) == 1) a = -1;
    }
  }

  Value elementwise(ValueId id) {
    const Node& n = g_.node(id);
    Split target(n.shape.rank(), -1);
    bool conflict = false;
    for (ValueId in : n.inputs) {
      const Split& s = map_[in].split;
      for (size_t d = 0; d < s.size(); ++d) {
        if (s[d] < 0) continue;
        if (target[d] < 0) target[d] = s[d];
        conflict = conflict || target[d] != s[d];
      }
    }
    if (!conflict && !repeats_an_axis(target) && any_split(target)) {
      std::vector<Split> wants(n.inputs.size(), target);
      if (auto ids = operands_as(n, wants)) return emit(n, *ids, target);
    }
    return replicated(id);
  }

  // Softmax and the norms: whole along the dims they reduce, split as the operand elsewhere.
  Value along(ValueId id, const std::vector<int>& axes) {
    const Node& n = g_.node(id);
    Value v = reduce_partial(map_[n.inputs[0]]);
    for (int a : axes) v = gather_dim(v, a);
    return emit(n, {v.id}, v.split);
  }

  Value reduce(ValueId id) {
    const Node& n = g_.node(id);
    Value v = map_[n.inputs[0]];
    const std::vector<int>& axes = n.attr<ir::AxesAttrs>().axes;
    int partial = v.partial;
    if (n.op != Op::reduce_sum) v = reduce_partial(v), partial = -1;
    for (int a : axes) {
      const int axis = v.split[a];
      if (axis < 0) continue;
      if (n.op == Op::reduce_sum && (partial < 0 || partial == axis)) {
        partial = axis;  // each device sums its block: partial sums over the axis
      } else {
        v = gather_dim(v, a);
      }
    }
    Split split;
    for (int d = 0; d < static_cast<int>(v.split.size()); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) split.push_back(v.split[d]);
    }
    return emit(n, {v.id}, split, partial);
  }

  // A reshape keeps a split where the split dim leads its group (the dims before it in the
  // group are of size 1) and the group's leading output dim divides by the axis: the shards
  // are then the same contiguous blocks of the group's elements.
  Value reshape(ValueId id) {
    const Node& n = g_.node(id);
    Value v = map_[n.inputs[0]];
    const Shape& in = g_.node(n.inputs[0]).shape;
    Split split(n.shape.rank(), -1);
    int i = 0, j = 0;
    while (i < in.rank() || j < n.shape.rank()) {
      const int i0 = i, j0 = j;
      int64_t pin = i < in.rank() ? in.size(i++) : 1;
      int64_t pout = j < n.shape.rank() ? n.shape.size(j++) : 1;
      while (pin != pout) {
        if (pin < pout && i < in.rank()) {
          pin *= in.size(i++);
        } else if (j < n.shape.rank()) {
          pout *= n.shape.size(j++);
        } else {
          break;
        }
      }
      int lead_in = -1, lead_out = -1;
      for (int a = i0; a < i && lead_in < 0; ++a) {
        if (in.size(a) != 1) lead_in = a;
      }
      for (int b = j0; b < j && lead_out < 0; ++b) {
        if (n.shape.size(b) != 1) lead_out = b;
      }
      for (int a = i0; a < i; ++a) {
        const int axis = v.split[a];
        if (axis < 0) continue;
        if (a == lead_in && lead_out >= 0 && n.shape.size(lead_out) % devices(axis) == 0) {
          split[lead_out] = axis;
        } else {
          v = gather_dim(v, a);
        }
      }
    }
    return emit(n, {v.id}, split, v.partial);
  }

  Value dot(ValueId id) {
    const Node& n = g_.node(id);
    const auto& a = n.attr<ir::DotAttrs>();
    Value l = reduce_partial(map_[n.inputs[0]]), r = reduce_partial(map_[n.inputs[1]]);
    int partial = -1;
    for (size_t k = 0; k < a.lhs_batch.size(); ++k) {
      if (l.split[a.lhs_batch[k]] != r.split[a.rhs_batch[k]]) {
        l = gather_dim(l, a.lhs_batch[k]);
        r = gather_dim(r, a.rhs_batch[k]);
      }
    }
    for (size_t k = 0; k < a.lhs_contract.size(); ++k) {
      const int ls = l.split[a.lhs_contract[k]], rs = r.split[a.rhs_contract[k]];
      if (ls >= 0 && ls == rs && partial < 0) {
        partial = ls;  // each device contracts its block: partial sums
      } else {
        l = gather_dim(l, a.lhs_contract[k]);
        r = gather_dim(r, a.rhs_contract[k]);
      }
    }
    auto is_in = [](const std::vector<int>& v, int x) {
      return std::find(v.begin(), v.end(), x) != v.end();
    };
    Split split;
    for (int b : a.lhs_batch) split.push_back(l.split[b]);
    for (int d = 0; d < static_cast<int>(l.split.size()); ++d) {
      if (!is_in(a.lhs_batch, d) && !is_in(a.lhs_contract, d)) split.push_back(l.split[d]);
    }
    std::set<int> used(split.begin(), split.end());
    if (partial >= 0) used.insert(partial);
    for (int d = 0; d < static_cast<int>(r.split.size()); ++d) {
      if (is_in(a.rhs_batch, d) || is_in(a.rhs_contract, d)) continue;
      if (r.split[d] >= 0 && used.contains(r.split[d])) r = gather_dim(r, d);
      split.push_back(r.split[d]);
    }
    return emit(n, {l.id, r.id}, split, partial);
  }

  // x {..., d} split anywhere but d; cos and sin split alike where they are not of size 1.
  Value rope(ValueId id) {
    const Node& n = g_.node(id);
    Value x = reduce_partial(map_[n.inputs[0]]);
    x = gather_dim(x, n.shape.rank() - 1);
    if (any_split(x.split)) {
      std::vector<Split> wants{x.split};
      for (int t = 1; t <= 2; ++t) {
        const Shape& s = g_.node(n.inputs[t]).shape;
        Split w(s.rank(), -1);
        for (int d = 0; d < s.rank(); ++d) {
          if (s.size(d) == n.shape.size(d)) w[d] = x.split[d];
        }
        wants.push_back(w);
      }
      if (auto ids = operands_as(n, wants)) return emit(n, *ids, x.split);
    }
    return replicated(id);
  }

  // q {B,Hq,Sq,D} k {B,Hkv,Sk,D} v {B,Hkv,Sk,Dv} [mask] [offset]: split by batch and heads
  // alike, every head's keys and values on the device of its queries. One key/value head
  // (multi-query attention) serves every query head: it stays whole on every device.
  Value attention(ValueId id) {
    const Node& n = g_.node(id);
    const auto& a = n.attr<ir::AttentionAttrs>();
    Value q = reduce_partial(map_[n.inputs[0]]);
    Split want{q.split[0], q.split[1], -1, -1};
    if (any_split(want)) {
      std::vector<Split> wants{want};
      bool divides = true;
      for (int t = 1; t <= 2; ++t) {
        const Shape& s = g_.node(n.inputs[t]).shape;
        Split w{want[0], s.size(1) == 1 ? -1 : want[1], -1, -1};
        for (int d = 0; d < 2; ++d) {
          divides = divides && (w[d] < 0 || s.size(d) % devices(w[d]) == 0);
        }
        wants.push_back(w);
      }
      if (a.has_mask) {
        const Shape& m = g_.node(n.inputs[3]).shape;
        wants.push_back({m.size(0) == 1 ? -1 : want[0], m.size(1) == 1 ? -1 : want[1], -1, -1});
      }
      if (a.has_offset) wants.push_back({});
      if (divides) {
        if (auto ids = operands_as(n, wants)) return emit(n, *ids, want);
      }
    }
    return replicated(id);
  }

  // x {B,S,C}, state {B,K,C}, weight {K+1,C}: a depthwise convolution, split by batch and
  // channels alike.
  Value short_conv(ValueId id) {
    const Node& n = g_.node(id);
    Value x = reduce_partial(map_[n.inputs[0]]);
    Split want{x.split[0], -1, x.split[2]};
    if (any_split(want)) {
      std::vector<Split> wants{want, want, {-1, want[2]}};
      if (auto ids = operands_as(n, wants)) return emit(n, *ids, want);
    }
    return replicated(id);
  }

  // q, k {B,Hk,S,Dk}, v {B,H,S,Dv}, g, beta {B,H,S}, state {B,H,Dk,Dv}: split by batch and
  // value heads, each block of value heads with the key heads it reads (one key head, read
  // by every value head, stays whole).
  Value delta_rule(ValueId id) {
    const Node& n = g_.node(id);
    Value v = reduce_partial(map_[n.inputs[2]]);
    const int b = v.split[0], h = v.split[1];
    const int64_t key_heads = g_.node(n.inputs[0]).shape.size(1);
    const bool divides = h < 0 || key_heads == 1 || key_heads % devices(h) == 0;
    if ((b >= 0 || h >= 0) && divides) {
      const Split qk{b, key_heads == 1 ? -1 : h, -1, -1};
      const std::vector<Split> wants{qk,         qk,         {b, h, -1, -1},
                                     {b, h, -1}, {b, h, -1}, {b, h, -1, -1}};
      if (auto ids = operands_as(n, wants)) return emit(n, *ids, {b, h, -1, -1});
    }
    return replicated(id);
  }

  // A KV cache split by heads takes a window split alike; the start indices are scalars.
  Value update_slice(ValueId id) {
    const Node& n = g_.node(id);
    const Shape& operand = g_.node(n.inputs[0]).shape;
    const Shape& update = g_.node(n.inputs[1]).shape;
    Split want = map_[n.inputs[0]].split;
    for (int d = 0; d < operand.rank(); ++d) {
      if (update.size(d) != operand.size(d)) want[d] = -1;
    }
    if (any_split(want)) {
      std::vector<Split> wants{want, want};
      for (size_t k = 2; k < n.inputs.size(); ++k) wants.push_back({});
      if (auto ids = operands_as(n, wants)) return emit(n, *ids, want);
    }
    return replicated(id);
  }

  // A table split along the dim it is indexed by (an embedding split by vocabulary): each
  // device looks up the indices in its block, zeros elsewhere, so the rows are partial sums
  // over the axis (exactly one device holds each row).
  Value gather(ValueId id) {
    const Node& n = g_.node(id);
    const int axis = n.attr<ir::AxisAttrs>().axis;
    Value table = reduce_partial(map_[n.inputs[0]]);
    const int mesh_axis = table.split[axis];
    if (mesh_axis < 0) return replicated(id);
    for (int d = 0; d < static_cast<int>(table.split.size()); ++d) {
      if (d != axis) table = gather_dim(table, d);
    }
    Tensor indices = tracer_.wrap(whole(map_[n.inputs[1]]).id);
    const DType it = indices.dtype();
    const int64_t block = local_of(table).size(axis);
    Tensor shifted = indices - coordinate(mesh_axis).convert(it) * static_cast<double>(block);
    Tensor mine = logical_and(ge(shifted, Tensor::scalar(0, it)),
                              lt(shifted, Tensor::scalar(static_cast<double>(block), it)));
    Tensor rows = tracer_.wrap(table.id).gather(local_of(table).tag(axis),
                                                select(mine, shifted, Tensor::scalar(0, it)));
    Tensor out = select(mine, rows, Tensor::scalar(0, rows.dtype())).reshape(n.shape);
    return {tracer_.use(out, "partition"), Split(n.shape.rank(), -1), mesh_axis};
  }

  // Operands split alike along other dims than the one they are joined on stay so.
  Value concatenate(ValueId id) {
    const Node& n = g_.node(id);
    Split want = reduce_partial(map_[n.inputs[0]]).split;
    want[n.attr<ir::AxisAttrs>().axis] = -1;
    if (any_split(want)) {
      if (auto ids = operands_as(n, std::vector<Split>(n.inputs.size(), want))) {
        return emit(n, *ids, want);
      }
    }
    return replicated(id);
  }

  // Slices keep the split of the dims they take whole.
  Value slice(ValueId id) {
    const Node& n = g_.node(id);
    Value v = reduce_partial(map_[n.inputs[0]]);
    const Shape& in = g_.node(n.inputs[0]).shape;
    for (int d = 0; d < in.rank(); ++d) {
      bool whole_dim = in.size(d) == n.shape.size(d);
      if (n.op == Op::slice) {
        const auto& s = n.attr<ir::SliceAttrs>();
        whole_dim = whole_dim && s.starts[d] == 0 && s.strides[d] == 1;
      }
      if (!whole_dim) v = gather_dim(v, d);
    }
    std::vector<ValueId> operands{v.id};
    for (size_t k = 1; k < n.inputs.size(); ++k) operands.push_back(whole(map_[n.inputs[k]]).id);
    Value out = emit(n, operands, v.split);
    if (n.op == Op::slice) {  // a split dim is taken whole: up to its shard's size
      auto attrs = n.attr<ir::SliceAttrs>();
      for (int d = 0; d < in.rank(); ++d) {
        if (out.split[d] >= 0) attrs.limits[d] = local_of(out).size(d);
      }
      graph().node(out.id).attrs = attrs;
    }
    return out;
  }

  const ir::Graph& g_;
  const Mesh& mesh_;
  const std::vector<Split>& inputs_;
  const std::vector<Split>& outputs_;
  std::vector<Value> map_;
  Partitioned result_;
  Tracer tracer_;
};

}  // namespace

Partitioned partition(const ir::Graph& graph, const Mesh& mesh, const std::vector<Split>& inputs,
                      const std::vector<Split>& outputs) {
  return Partitioner(graph, mesh, inputs, outputs).run();
}

}  // namespace prism::compiler
