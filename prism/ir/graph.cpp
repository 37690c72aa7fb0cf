#include "prism/ir/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "prism/core/error.h"

namespace prism::ir {
namespace {

struct OpInfo {
  std::string_view name;
  OpKind kind;
};

constexpr OpInfo kOps[] = {
#define PRISM_OP(name, kind) {#name, OpKind::kind},
#include "prism/ir/ops.def"
#undef PRISM_OP
};

// FNV-1a over bytes, good enough to key a compile cache (collisions also compare shapes).
struct Hasher {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    auto* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  }
  template <typename T>
  void value(const T& v) {
    bytes(&v, sizeof(v));
  }
  template <typename T>
  void values(const std::vector<T>& v) {
    value(v.size());
    if (!v.empty()) bytes(v.data(), v.size() * sizeof(T));
  }
  void str(std::string_view s) {
    value(s.size());
    bytes(s.data(), s.size());
  }
};

template <typename T>
std::string join(const std::vector<T>& v) {
  return fmt::format("[{}]", fmt::join(v, ","));
}

std::string attrs_str(const Node& n) {
  return std::visit(
      [&](const auto& a) -> std::string {
        using A = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<A, ParameterAttrs>) {
          return fmt::format(" \"{}\"", a.name);
        } else if constexpr (std::is_same_v<A, InputAttrs>) {
          return fmt::format(" #{}", a.index);
        } else if constexpr (std::is_same_v<A, ConstantAttrs>) {
          if (n.shape.numel() == 1 && n.shape.dtype() == DType::f32) {
            float f;
            std::memcpy(&f, a.data->data(), 4);
            return fmt::format(" {}", f);
          }
          return fmt::format(" <{} bytes>", a.data->size());
        } else if constexpr (std::is_same_v<A, AxisAttrs>) {
          return fmt::format(" axis={}{}{}", a.axis, a.exclusive ? " exclusive" : "",
                             a.reverse ? " reverse" : "");
        } else if constexpr (std::is_same_v<A, AxesAttrs>) {
          return " axes=" + join(a.axes);
        } else if constexpr (std::is_same_v<A, DotAttrs>) {
          return fmt::format(" batch={}x{} contract={}x{}", join(a.lhs_batch), join(a.rhs_batch),
                             join(a.lhs_contract), join(a.rhs_contract));
        } else if constexpr (std::is_same_v<A, SliceAttrs>) {
          return fmt::format(" start={} limit={} stride={}", join(a.starts), join(a.limits),
                             join(a.strides));
        } else if constexpr (std::is_same_v<A, PadAttrs>) {
          return fmt::format(" low={} high={} mode={}", join(a.low), join(a.high),
                             static_cast<int>(a.mode));
        } else if constexpr (std::is_same_v<A, ScatterAttrs>) {
          return fmt::format(" axis={} reduce={}", a.axis, static_cast<int>(a.reduce));
        } else if constexpr (std::is_same_v<A, ConvAttrs>) {
          return fmt::format(" strides={} pad={}/{} dilations={} groups={}", join(a.strides),
                             join(a.pad_low), join(a.pad_high), join(a.dilations), a.groups);
        } else if constexpr (std::is_same_v<A, ArgsortAttrs>) {
          return fmt::format(" axis={} k={} {}", a.axis, a.k, a.descending ? "desc" : "asc");
        } else if constexpr (std::is_same_v<A, NormAttrs>) {
          return fmt::format(" axes={} eps={}", join(a.axes), a.eps);
        } else if constexpr (std::is_same_v<A, RopeAttrs>) {
          return a.interleaved ? " interleaved" : " rotate_half";
        } else if constexpr (std::is_same_v<A, AttentionAttrs>) {
          return fmt::format(" scale={}{}{}", a.scale, a.causal ? " causal" : "",
                             a.window ? fmt::format(" window={}", a.window) : "");
        } else if constexpr (std::is_same_v<A, GatedDeltaRuleAttrs>) {
          return a.chunk ? fmt::format(" chunk={}", a.chunk) : std::string(" recurrent");
        } else {
          return "";
        }
      },
      n.attrs);
}

}  // namespace

std::string_view op_name(Op op) { return kOps[static_cast<int>(op)].name; }
OpKind op_kind(Op op) { return kOps[static_cast<int>(op)].kind; }

ValueId Graph::add(Node node) {
  for (ValueId in : node.inputs) {
    if (in < 0 || in >= size()) fail("graph: {} refers to missing value %{}", op_name(node.op), in);
  }
  nodes_.push_back(std::move(node));
  return size() - 1;
}

std::vector<ValueId> Graph::inputs() const {
  std::vector<std::pair<int, ValueId>> found;
  for (ValueId i = 0; i < size(); ++i) {
    if (nodes_[i].op == Op::input) found.emplace_back(nodes_[i].attr<InputAttrs>().index, i);
  }
  std::sort(found.begin(), found.end());
  std::vector<ValueId> ids;
  for (auto& [index, id] : found) ids.push_back(id);
  return ids;
}

std::vector<ValueId> Graph::parameters() const {
  std::vector<ValueId> ids;
  for (ValueId i = 0; i < size(); ++i) {
    if (nodes_[i].op == Op::parameter) ids.push_back(i);
  }
  return ids;
}

namespace {

void hash_into(Hasher& h, const Node& n) {
  h.value(n.op);
  h.value(n.shape.dtype());
  for (const Dim& d : n.shape.dims()) h.value(d.size), h.value(d.tag.id());
  h.values(n.inputs);
  h.value(n.attrs.index());
  std::visit(
      [&](const auto& a) {
        using A = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<A, ParameterAttrs>) {
          h.str(a.name);
        } else if constexpr (std::is_same_v<A, InputAttrs>) {
          h.value(a.index);
        } else if constexpr (std::is_same_v<A, ConstantAttrs>) {
          h.bytes(a.data->data(), a.data->size());
        } else if constexpr (std::is_same_v<A, AxisAttrs>) {
          h.value(a.axis), h.value(a.exclusive), h.value(a.reverse);
        } else if constexpr (std::is_same_v<A, AxesAttrs>) {
          h.values(a.axes);
        } else if constexpr (std::is_same_v<A, DotAttrs>) {
          h.values(a.lhs_batch), h.values(a.rhs_batch), h.values(a.lhs_contract),
              h.values(a.rhs_contract);
        } else if constexpr (std::is_same_v<A, SliceAttrs>) {
          h.values(a.starts), h.values(a.limits), h.values(a.strides);
        } else if constexpr (std::is_same_v<A, PadAttrs>) {
          h.values(a.low), h.values(a.high), h.value(a.mode);
        } else if constexpr (std::is_same_v<A, ScatterAttrs>) {
          h.value(a.axis), h.value(a.reduce);
        } else if constexpr (std::is_same_v<A, ConvAttrs>) {
          h.values(a.strides), h.values(a.pad_low), h.values(a.pad_high), h.values(a.dilations),
              h.value(a.groups);
        } else if constexpr (std::is_same_v<A, ArgsortAttrs>) {
          h.value(a.axis), h.value(a.k), h.value(a.descending);
        } else if constexpr (std::is_same_v<A, NormAttrs>) {
          h.values(a.axes), h.value(a.eps);
        } else if constexpr (std::is_same_v<A, RopeAttrs>) {
          h.value(a.interleaved);
        } else if constexpr (std::is_same_v<A, AttentionAttrs>) {
          h.value(a.scale), h.value(a.causal), h.value(a.window), h.value(a.has_mask),
              h.value(a.has_offset);
        } else if constexpr (std::is_same_v<A, GatedDeltaRuleAttrs>) {
          h.value(a.chunk);
        }
      },
      n.attrs);
}

}  // namespace

uint64_t hash(const Node& node) {
  Hasher h;
  hash_into(h, node);
  return h.h;
}

uint64_t Graph::hash() const {
  Hasher h;
  for (const Node& n : nodes_) hash_into(h, n);
  h.values(outputs_);
  return h.h;
}

std::string print(const Graph& g, ValueId id) {
  const Node& n = g.node(id);
  std::string args;
  for (ValueId in : n.inputs) args += fmt::format("{}%{}", args.empty() ? "" : ", ", in);
  return fmt::format("%{} = {} {}({}){}", id, n.shape.str(), op_name(n.op), args, attrs_str(n));
}

std::string print(const Graph& g) {
  std::string s;
  for (ValueId i = 0; i < g.size(); ++i) s += print(g, i) + "\n";
  std::string outs;
  for (ValueId o : g.outputs()) outs += fmt::format("{}%{}", outs.empty() ? "" : ", ", o);
  return s + "return " + outs + "\n";
}

}  // namespace prism::ir
