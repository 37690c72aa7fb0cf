#include "prism/ir/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <tuple>
#include <type_traits>

#include "prism/core/error.h"

namespace prism::ir {
namespace {

// Where T is in Attrs; an ops.def line naming attributes that Attrs does not hold fails here.
template <typename T, size_t I = 0>
constexpr size_t attrs_index() {
  static_assert(I < std::variant_size_v<Attrs>, "ops.def names attributes that Attrs lacks");
  if constexpr (std::is_same_v<std::variant_alternative_t<I, Attrs>, T>) {
    return I;
  } else {
    return attrs_index<T, I + 1>();
  }
}

struct OpInfo {
  std::string_view name;
  OpKind kind;
  Arity arity;
  size_t attrs;
  Types types;
};

constexpr OpInfo kOps[] = {
#define PRISM_OP(name, kind, arity, attrs, types) \
  {#name, OpKind::kind, Arity::arity, attrs_index<attrs>(), Types::types},
#include "prism/ir/ops.def"
#undef PRISM_OP
};

constexpr std::string_view kAttrsNames[] = {
    "NoAttrs",         "ParameterAttrs", "InputAttrs",     "ConstantAttrs",
    "AxisAttrs",       "AxesAttrs",      "DotAttrs",       "SliceAttrs",
    "PadAttrs",        "ScatterAttrs",   "ConvAttrs",      "ArgsortAttrs",
    "NormAttrs",       "RopeAttrs",      "AttentionAttrs", "GatedDeltaRuleAttrs",
    "CollectiveAttrs", "DequantizeAttrs"};
static_assert(std::size(kAttrsNames) == std::variant_size_v<Attrs>,
              "a name for every alternative of Attrs");

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

// One field as `name=value`; a flag as its name where it is set, nothing where not.
template <typename T>
std::string field_str(const Field<T>& f) {
  if constexpr (std::is_same_v<T, bool>) {
    return f.value ? fmt::format(" {}", f.name) : "";
  } else if constexpr (std::is_same_v<T, quant::GgmlType>) {
    return fmt::format(" {}={}", f.name, quant::name(f.value));
  } else if constexpr (std::is_enum_v<T>) {
    return fmt::format(" {}={}", f.name, static_cast<int>(f.value));
  } else if constexpr (std::is_same_v<T, std::string>) {
    return f.value.empty() ? "" : fmt::format(" {}=\"{}\"", f.name, f.value);
  } else if constexpr (requires { f.value.size(); }) {
    return fmt::format(" {}={}", f.name, join(f.value));
  } else {
    return fmt::format(" {}={}", f.name, f.value);
  }
}

std::string attrs_str(const Node& n) {
  return std::visit(
      [&](const auto& a) -> std::string {
        using A = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<A, NoAttrs>) {
          return "";
        } else if constexpr (std::is_same_v<A, ConstantAttrs>) {
          if (n.shape.numel() == 1 && n.shape.dtype() == DType::f32) {
            float f;
            std::memcpy(&f, a.data->data(), 4);
            return fmt::format(" {}", f);
          }
          return fmt::format(" <{} bytes>", a.data->size());
        } else {
          return std::apply([](const auto&... f) { return (std::string() + ... + field_str(f)); },
                            a.fields());
        }
      },
      n.attrs);
}

}  // namespace

std::string_view op_name(Op op) { return kOps[static_cast<int>(op)].name; }
OpKind op_kind(Op op) { return kOps[static_cast<int>(op)].kind; }
Arity op_arity(Op op) { return kOps[static_cast<int>(op)].arity; }
Types op_types(Op op) { return kOps[static_cast<int>(op)].types; }
size_t op_attrs_index(Op op) { return kOps[static_cast<int>(op)].attrs; }
std::string_view attrs_name(size_t index) {
  return index < std::size(kAttrsNames) ? kAttrsNames[index] : "?";
}

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

template <typename T>
void hash_field(Hasher& h, const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    h.str(v);
  } else if constexpr (std::is_same_v<T, std::shared_ptr<const std::vector<std::byte>>>) {
    h.bytes(v->data(), v->size());
  } else if constexpr (requires { v.size(); }) {
    h.values(v);
  } else {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>, "a field hashing cannot read");
    h.value(v);
  }
}

void hash_into(Hasher& h, const Node& n) {
  h.value(n.op);
  h.value(n.shape.dtype());
  for (const Dim& d : n.shape.dims()) h.value(d.size), h.value(d.tag.id());
  h.values(n.inputs);
  h.value(n.attrs.index());
  std::visit(
      [&](const auto& a) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(a)>, NoAttrs>) {
          std::apply([&](const auto&... f) { (hash_field(h, f.value), ...); }, a.fields());
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
