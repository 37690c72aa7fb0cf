#include "prism/backends/pjrt/stablehlo.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "prism/core/error.h"

namespace prism::pjrt {

using ir::Op;
using ir::ValueId;

namespace {

const char* element_type(DType t) {
  switch (t) {
    case DType::f64:
      return "f64";
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i64:
      return "i64";
    case DType::i32:
      return "i32";
    case DType::i16:
      return "i16";
    case DType::i8:
      return "i8";
    case DType::u8:
      return "ui8";
    case DType::u32:
      return "ui32";
    case DType::boolean:
      return "i1";
  }
  return "?";
}

std::string tensor_type(const Shape& s) {
  std::string t = "tensor<";
  for (int a = 0; a < s.rank(); ++a) t += fmt::format("{}x", s.size(a));
  return t + element_type(s.dtype()) + ">";
}

std::string scalar_type(DType t) { return fmt::format("tensor<{}>", element_type(t)); }

std::string i64_array(const std::vector<int64_t>& v) {
  return fmt::format("array<i64{}{}>", v.empty() ? "" : ": ", fmt::join(v, ", "));
}
std::string i64_array(const std::vector<int>& v) {
  return i64_array(std::vector<int64_t>(v.begin(), v.end()));
}

// The name of an elementwise op's StableHLO counterpart, or null.
const char* elementwise_name(Op op) {
  switch (op) {
    case Op::neg:
      return "negate";
    case Op::abs:
      return "abs";
    case Op::exp:
      return "exponential";
    case Op::log:
      return "log";
    case Op::log1p:
      return "log_plus_one";
    case Op::sqrt:
      return "sqrt";
    case Op::rsqrt:
      return "rsqrt";
    case Op::tanh:
      return "tanh";
    case Op::logistic:
      return "logistic";
    case Op::sin:
      return "sine";
    case Op::cos:
      return "cosine";
    case Op::floor:
      return "floor";
    case Op::ceil:
      return "ceil";
    case Op::round:
      return "round_nearest_even";
    case Op::sign:
      return "sign";
    case Op::logical_not:
      return "not";
    case Op::convert:
      return "convert";
    case Op::add:
      return "add";
    case Op::sub:
      return "subtract";
    case Op::mul:
      return "multiply";
    case Op::div:
      return "divide";
    case Op::pow:
      return "power";
    case Op::max:
      return "maximum";
    case Op::min:
      return "minimum";
    case Op::rem:
      return "remainder";
    case Op::atan2:
      return "atan2";
    case Op::logical_and:
      return "and";
    case Op::logical_or:
      return "or";
    case Op::logical_xor:
      return "xor";
    case Op::select:
      return "select";
    default:
      return nullptr;
  }
}

const char* comparison(Op op) {
  switch (op) {
    case Op::eq:
      return "EQ";
    case Op::ne:
      return "NE";
    case Op::lt:
      return "LT";
    case Op::le:
      return "LE";
    case Op::gt:
      return "GT";
    case Op::ge:
      return "GE";
    default:
      return nullptr;
  }
}

// A scalar constant of dtype t, as MLIR reads it.
std::string scalar_literal(double v, DType t) {
  if (t == DType::boolean) return v != 0 ? "true" : "false";
  if (!is_float(t)) return fmt::format("{}", static_cast<int64_t>(v));
  if (std::isinf(v)) {  // MLIR spells infinities by their bits
    switch (t) {
      case DType::f64:
        return v > 0 ? "0x7FF0000000000000" : "0xFFF0000000000000";
      case DType::f32:
        return v > 0 ? "0x7F800000" : "0xFF800000";
      case DType::f16:
        return v > 0 ? "0x7C00" : "0xFC00";
      default:
        return v > 0 ? "0x7F80" : "0xFF80";
    }
  }
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

class Printer {
 public:
  Printer(const ir::Graph& g, const std::map<int, int>& aliases,
          const ModuleSharding* sharding = nullptr)
      : g_(g), aliases_(aliases), sharding_(sharding), name_(g.size()) {}

  std::string operator()() {
    std::vector<ValueId> args = g_.parameters();
    std::vector<ValueId> inputs;
    for (ValueId id = 0; id < g_.size(); ++id) {
      if (g_.node(id).op == Op::input) inputs.push_back(id);
    }
    std::sort(inputs.begin(), inputs.end(), [&](ValueId a, ValueId b) {
      return g_.node(a).attr<ir::InputAttrs>().index < g_.node(b).attr<ir::InputAttrs>().index;
    });
    args.insert(args.end(), inputs.begin(), inputs.end());
    std::string signature;
    for (size_t k = 0; k < args.size(); ++k) {
      name_[args[k]] = fmt::format("%arg{}", k);
      signature += fmt::format("{}%arg{}: {}", k ? ", " : "", k, type(args[k]));
      std::vector<std::string> attrs;
      if (auto it = aliases_.find(static_cast<int>(k)); it != aliases_.end()) {
        attrs.push_back(fmt::format("tf.aliasing_output = {} : i32", it->second));
      }
      if (sharding_ && k < sharding_->arguments.size()) {
        attrs.push_back(sharding_attr(sharding_->arguments[k]));
      }
      if (!attrs.empty()) signature += fmt::format(" {{{}}}", fmt::join(attrs, ", "));
    }
    for (ValueId id = 0; id < g_.size(); ++id) {
      const ir::Node& n = g_.node(id);
      if (n.op == Op::parameter || n.op == Op::input) continue;
      name_[id] = fmt::format("%{}", id);
      const size_t from = body_.size();
      node(id);
      locate(from, id);
    }
    std::vector<std::string> results, result_types, annotated;
    for (size_t k = 0; k < g_.outputs().size(); ++k) {
      const ValueId out = g_.outputs()[k];
      results.push_back(name_[out]);
      result_types.push_back(type(out));
      annotated.push_back(
          sharding_ && k < sharding_->results.size()
              ? fmt::format("{} {{{}}}", type(out), sharding_attr(sharding_->results[k]))
              : type(out));
    }
    std::string module = "module @prism {\n";
    if (sharding_) {
      module = fmt::format(
          "module @prism attributes {{mhlo.num_partitions = {} : i32, "
          "mhlo.num_replicas = 1 : i32}} {{\n",
          sharding_->mesh.devices());
      if (sharding_->partitioner == Partitioner::shardy) {
        module += fmt::format("  sdy.mesh @mesh = {}\n", sdy_mesh(sharding_->mesh));
      }
    }
    module += fmt::format("  func.func public @main({}) -> ({}) {{\n", signature,
                          fmt::join(annotated, ", "));
    module += body_;
    module += fmt::format("    \"func.return\"({}) : ({}) -> ()\n  }}\n}}\n",
                          fmt::join(results, ", "), fmt::join(result_types, ", "));
    return module;
  }

 private:
  std::string type(ValueId v) const { return tensor_type(g_.node(v).shape); }

  // The attribute saying how an argument or result split as `split` lies on the mesh.
  std::string sharding_attr(const std::vector<int>& split) const {
    if (sharding_->partitioner == Partitioner::shardy) {
      return "sdy.sharding = " + sdy_sharding(split, sharding_->mesh);
    }
    return fmt::format("mhlo.sharding = \"{}\"", hlo_sharding(split, sharding_->mesh));
  }

  // `%id = "stablehlo.<op>"(operands) <attrs> : (operand types) -> result type`
  void emit(ValueId id, const std::string& op, const std::vector<ValueId>& operands,
            const std::string& attrs = "") {
    std::vector<std::string> names, types;
    for (ValueId v : operands) {
      names.push_back(name_[v]);
      types.push_back(type(v));
    }
    body_ += fmt::format("    {} = \"stablehlo.{}\"({}){} : ({}) -> {}\n", name_[id], op,
                         fmt::join(names, ", "), attrs.empty() ? "" : " " + attrs,
                         fmt::join(types, ", "), type(id));
  }

  // A fresh scalar constant of `literal`; returns its name.
  std::string scalar(const std::string& literal, DType t) {
    std::string name = fmt::format("%c{}", fresh_++);
    body_ +=
        fmt::format("    {} = \"stablehlo.constant\"() {{value = dense<{}> : {}}} : () -> {}\n",
                    name, literal, scalar_type(t), scalar_type(t));
    return name;
  }

  void constant(ValueId id) {
    const ir::Node& n = g_.node(id);
    const std::vector<std::byte>& bytes = *n.attr<ir::ConstantAttrs>().data;
    std::string value;
    if (n.shape.dtype() == DType::boolean) {  // i1 elements are spelled out
      std::vector<const char*> v;
      for (std::byte b : bytes) v.push_back(b != std::byte{0} ? "true" : "false");
      value = n.shape.rank() == 0 ? v.at(0) : fmt::format("[{}]", fmt::join(v, ", "));
      if (n.shape.rank() > 1) {
        fail("pjrt: a boolean constant of rank {} has no StableHLO lowering yet ({})",
             n.shape.rank(), ir::print(g_, id));
      }
    } else {
      value = "\"0x";
      for (std::byte b : bytes) value += fmt::format("{:02X}", static_cast<unsigned>(b));
      value += "\"";
    }
    body_ +=
        fmt::format("    {} = \"stablehlo.constant\"() {{value = dense<{}> : {}}} : () -> {}\n",
                    name_[id], value, type(id), type(id));
  }

  // A reduction of operand 0 over `axes`, combining with stablehlo.<combine> from `init`.
  void reduce(ValueId id, const std::vector<int>& axes, const char* combine,
              const std::string& init) {
    const ir::Node& n = g_.node(id);
    const DType t = g_.node(n.inputs[0]).shape.dtype();
    const std::string s = scalar_type(t), init_name = scalar(init, t);
    body_ += fmt::format(
        "    {0} = \"stablehlo.reduce\"({1}, {2}) ({{\n"
        "    ^bb0(%a: {3}, %b: {3}):\n"
        "      %r = \"stablehlo.{4}\"(%a, %b) : ({3}, {3}) -> {3}\n"
        "      \"stablehlo.return\"(%r) : ({3}) -> ()\n"
        "    }}) {{dimensions = {5}}} : ({6}, {3}) -> {7}\n",
        name_[id], name_[n.inputs[0]], init_name, s, combine, i64_array(axes), type(n.inputs[0]),
        type(id));
  }

  // A splat constant of `literal` in the shape and dtype of value v; returns its name.
  std::string splat(const std::string& literal, ValueId v) {
    std::string name = fmt::format("%c{}", fresh_++);
    body_ +=
        fmt::format("    {} = \"stablehlo.constant\"() {{value = dense<{}> : {}}} : () -> {}\n",
                    name, literal, type(v), type(v));
    return name;
  }

  // `%name = "stablehlo.<op>"(args) : (arg types) -> result`, with every type that of value v.
  std::string same_type(const std::string& op, const std::vector<std::string>& args, ValueId v,
                        const std::string& result_type = "") {
    std::string name = fmt::format("%c{}", fresh_++);
    std::vector<std::string> types(args.size(), type(v));
    body_ +=
        fmt::format("    {} = \"stablehlo.{}\"({}) : ({}) -> {}\n", name, op, fmt::join(args, ", "),
                    fmt::join(types, ", "), result_type.empty() ? type(v) : result_type);
    return name;
  }

  // Index select along one axis: indices counted from the end when negative, then clamped
  // (gather clamps the start of each slice into the operand).
  void gather(ValueId id) {
    const ir::Node& n = g_.node(id);
    const int axis = n.attr<ir::AxisAttrs>().axis;
    const ValueId x = n.inputs[0], idx = n.inputs[1];
    const Shape& xs = g_.node(x).shape;
    const Shape& is = g_.node(idx).shape;
    std::string negative_type = tensor_type(is.with_dtype(DType::boolean));
    std::string negative = fmt::format("%c{}", fresh_++);
    const std::string zero = splat("0", idx);
    body_ += fmt::format(
        "    {} = \"stablehlo.compare\"({}, {}) {{comparison_direction = "
        "#stablehlo<comparison_direction LT>}} : ({}, {}) -> {}\n",
        negative, name_[idx], zero, type(idx), type(idx), negative_type);
    const std::string wrapped =
        same_type("add", {name_[idx], splat(fmt::format("{}", xs.size(axis)), idx)}, idx);
    std::string index = fmt::format("%c{}", fresh_++);
    body_ +=
        fmt::format("    {} = \"stablehlo.select\"({}, {}, {}) : ({}, {}, {}) -> {}\n", index,
                    negative, wrapped, name_[idx], negative_type, type(idx), type(idx), type(idx));
    std::vector<int64_t> offset_dims, slice_sizes;
    for (int a = 0; a < xs.rank(); ++a) {
      slice_sizes.push_back(a == axis ? 1 : xs.size(a));
      if (a != axis) offset_dims.push_back(a < axis ? a : a - 1 + is.rank());
    }
    body_ += fmt::format(
        "    {} = \"stablehlo.gather\"({}, {}) {{dimension_numbers = #stablehlo.gather<offset_dims "
        "= [{}], collapsed_slice_dims = [{}], start_index_map = [{}], index_vector_dim = {}>, "
        "slice_sizes = {}, indices_are_sorted = false}} : ({}, {}) -> {}\n",
        name_[id], name_[x], index, fmt::join(offset_dims, ", "), axis, axis, is.rank(),
        i64_array(slice_sizes), type(x), type(idx), type(id));
  }

  void convolution(ValueId id) {
    const ir::Node& n = g_.node(id);
    const auto& a = n.attr<ir::ConvAttrs>();
    const int spatial = n.shape.rank() - 2;
    std::vector<std::string> dims, padding;
    for (int i = 0; i < spatial; ++i) {
      dims.push_back(std::to_string(i));
      padding.push_back(fmt::format("[{}, {}]", a.pad_low[i], a.pad_high[i]));
    }
    const std::string d = fmt::format("{}", fmt::join(dims, ", "));
    for (ValueId in : n.inputs) {
      PRISM_CHECK(g_.node(in).shape.dtype() == n.shape.dtype(),
                  "pjrt: a convolution of {} into {} has no StableHLO lowering yet ({})",
                  name(g_.node(in).shape.dtype()), name(n.shape.dtype()), ir::print(g_, id));
    }
    emit(
        id, "convolution", n.inputs,
        fmt::format("{{dimension_numbers = #stablehlo.conv<[b, f, {0}]x[o, i, {0}]->[b, f, {0}]>, "
                    "window_strides = {1}, padding = dense<[{2}]> : tensor<{3}x2xi64>, "
                    "lhs_dilation = {4}, rhs_dilation = {5}, feature_group_count = {6} : i64, "
                    "batch_group_count = 1 : i64}}",
                    d, i64_array(a.strides), fmt::join(padding, ", "), spatial,
                    i64_array(std::vector<int64_t>(spatial, 1)), i64_array(a.dilations), a.groups));
  }

  // Gives every op printed from `from` on the location of node id (its prism text), so that a
  // plugin's compiler that rejects one names the prism node.
  void locate(size_t from, ValueId id) {
    std::string where;
    for (char c : ir::print(g_, id)) {
      if (c == '"' || c == '\\') where += '\\';
      where += c;
    }
    const std::string loc = fmt::format(" loc(\"{}\")", where);
    std::string located = body_.substr(0, from);
    for (size_t at = from; at < body_.size();) {
      size_t end = body_.find('\n', at);
      std::string line = body_.substr(at, end - at);
      const size_t text = line.find_first_not_of(' ');
      const bool op =
          text != std::string::npos &&
          (line[text] == '%' || line[text] == '"' || line.compare(text, 2, "})") == 0) &&
          !line.ends_with("({");
      located += line + (op ? loc : "") + "\n";
      at = end + 1;
    }
    body_ = std::move(located);
  }

  // A fresh name.
  std::string fresh() { return fmt::format("%c{}", fresh_++); }

  // The i64 iota along `axis` of `shape`; returns its name and sets its type.
  std::string iota(const Shape& shape, int axis, std::string* type) {
    *type = tensor_type(shape.with_dtype(DType::i64));
    std::string name = fresh();
    body_ += fmt::format("    {} = \"stablehlo.iota\"() {{iota_dimension = {} : i64}} : () -> {}\n",
                         name, axis, *type);
    return name;
  }

  // `from` (of type from_type) converted to the type of value `to`, into name_[to].
  void convert_into(ValueId to, const std::string& from, const std::string& from_type) {
    body_ += fmt::format("    {} = \"stablehlo.convert\"({}) : ({}) -> {}\n", name_[to], from,
                         from_type, type(to));
  }

  // Statements of a comparator region deciding whether (av, ai) comes before (bv, bi) in a
  // total order: by value (larger first when `larger_first`), NaN beyond every number, then
  // by the lower index. Leaves the i1 answer in %before.
  std::string order(DType t, bool larger_first) {
    const std::string s = scalar_type(t);
    auto cmp = [&](const char* out, const char* a, const char* b, const char* dir,
                   const std::string& ty) {
      return fmt::format(
          "      {} = \"stablehlo.compare\"({}, {}) {{comparison_direction = "
          "#stablehlo<comparison_direction {}>}} : ({}, {}) -> tensor<i1>\n",
          out, a, b, dir, ty, ty);
    };
    auto pick = [&](const char* out, const char* c, const char* a, const char* b) {
      return fmt::format(
          "      {} = \"stablehlo.select\"({}, {}, {}) : (tensor<i1>, tensor<i1>, tensor<i1>) -> "
          "tensor<i1>\n",
          out, c, a, b);
    };
    std::string r;
    r += cmp("%earlier", "%ai", "%bi", "LT", "tensor<i64>");
    r += cmp("%better", "%av", "%bv", larger_first ? "GT" : "LT", s);
    r += cmp("%same", "%av", "%bv", "EQ", s);
    r += pick("%by_value", "%same", "%earlier", "%better");
    if (!is_float(t))
      return r +
             "      %before = \"stablehlo.and\"(%by_value, %by_value) : "
             "(tensor<i1>, tensor<i1>) -> tensor<i1>\n";
    r += cmp("%an", "%av", "%av", "NE", s);
    r += cmp("%bn", "%bv", "%bv", "NE", s);
    r += "      %both = \"stablehlo.and\"(%an, %bn) : (tensor<i1>, tensor<i1>) -> tensor<i1>\n";
    r += "      %either = \"stablehlo.or\"(%an, %bn) : (tensor<i1>, tensor<i1>) -> tensor<i1>\n";
    // NaN is the largest value: first when larger values are, last otherwise.
    r += pick("%nan_first", "%both", "%earlier", larger_first ? "%an" : "%bn");
    r += pick("%before", "%either", "%nan_first", "%by_value");
    return r;
  }

  // i64 columns of one shape, each an index into one axis, as index tuples: shape + [columns].
  std::string index_tuples(const std::vector<std::string>& columns, const Shape& shape,
                           std::string* tuples_type) {
    const std::string column_type = tensor_type(shape.with_dtype(DType::i64));
    std::vector<Dim> dims(shape.dims().begin(), shape.dims().end());
    dims.push_back({Tag(), 1});
    const std::string reshaped_type = tensor_type(Shape(DType::i64, dims));
    std::vector<std::string> reshaped, types;
    for (const std::string& c : columns) {
      reshaped.push_back(fresh());
      types.push_back(reshaped_type);
      body_ += fmt::format("    {} = \"stablehlo.reshape\"({}) : ({}) -> {}\n", reshaped.back(), c,
                           column_type, reshaped_type);
    }
    dims.back().size = static_cast<int64_t>(columns.size());
    *tuples_type = tensor_type(Shape(DType::i64, dims));
    const std::string tuples = fresh();
    body_ += fmt::format(
        "    {} = \"stablehlo.concatenate\"({}) {{dimension = {} : i64}} : ({}) -> {}\n", tuples,
        fmt::join(reshaped, ", "), shape.rank(), fmt::join(types, ", "), *tuples_type);
    return tuples;
  }

  // Value id: one element of x per index tuple (a tuple per element of id).
  void gather_elements(ValueId id, ValueId x, const std::string& tuples,
                       const std::string& tuples_type) {
    const int rank = g_.node(x).shape.rank();
    std::vector<int64_t> all, ones(rank, 1);
    for (int d = 0; d < rank; ++d) all.push_back(d);
    body_ += fmt::format(
        "    {} = \"stablehlo.gather\"({}, {}) {{dimension_numbers = #stablehlo.gather<"
        "collapsed_slice_dims = [{}], start_index_map = [{}], index_vector_dim = {}>, "
        "slice_sizes = {}, indices_are_sorted = false}} : ({}, {}) -> {}\n",
        name_[id], name_[x], tuples, fmt::join(all, ", "), fmt::join(all, ", "),
        g_.node(id).shape.rank(), i64_array(ones), type(x), tuples_type, type(id));
  }

  // The indices of `idx` (counted from the end when negative) along `axis`, with every other
  // axis's own position, as gather and scatter index tuples: i64 of shape idx + [rank].
  std::string full_indices(ValueId idx, int axis, int64_t size, std::string* indices_type) {
    const Shape& is = g_.node(idx).shape;
    const int rank = is.rank();
    const Shape i64 = is.with_dtype(DType::i64);
    const std::string i64_type = tensor_type(i64);
    std::string j = fresh();
    body_ += fmt::format("    {} = \"stablehlo.convert\"({}) : ({}) -> {}\n", j, name_[idx],
                         type(idx), i64_type);
    const std::string zero = fresh(), count = fresh(), negative = fresh(), wrapped = fresh(),
                      index = fresh();
    const std::string bool_type = tensor_type(is.with_dtype(DType::boolean));
    body_ += fmt::format(
        "    {0} = \"stablehlo.constant\"() {{value = dense<0> : {2}}} : () -> {2}\n"
        "    {1} = \"stablehlo.constant\"() {{value = dense<{3}> : {2}}} : () -> {2}\n",
        zero, count, i64_type, size);
    body_ += fmt::format(
        "    {} = \"stablehlo.compare\"({}, {}) {{comparison_direction = "
        "#stablehlo<comparison_direction LT>}} : ({}, {}) -> {}\n",
        negative, j, zero, i64_type, i64_type, bool_type);
    body_ += fmt::format("    {} = \"stablehlo.add\"({}, {}) : ({}, {}) -> {}\n", wrapped, j, count,
                         i64_type, i64_type, i64_type);
    body_ += fmt::format("    {} = \"stablehlo.select\"({}, {}, {}) : ({}, {}, {}) -> {}\n", index,
                         negative, wrapped, j, bool_type, i64_type, i64_type, i64_type);
    std::vector<std::string> columns;
    for (int d = 0; d < rank; ++d) {
      std::string ignored;
      columns.push_back(d == axis ? index : iota(i64, d, &ignored));
    }
    return index_tuples(columns, is, indices_type);
  }

  // `op` applied to two i64 values of type `t`; returns the result's name.
  std::string i64_op(const std::string& op, const std::string& a, const std::string& b,
                     const std::string& t) {
    std::string name = fresh();
    body_ += fmt::format("    {} = \"stablehlo.{}\"({}, {}) : ({}, {}) -> {}\n", name, op, a, b, t,
                         t, t);
    return name;
  }
  std::string i64_splat(int64_t v, const std::string& t) {
    std::string name = fresh();
    body_ += fmt::format(
        "    {} = \"stablehlo.constant\"() {{value = dense<{}> : {}}} : () -> {}\n", name, v, t, t);
    return name;
  }
  // a < b ? then : otherwise, on i64 values of type `t` (`bool_t` for the comparison).
  std::string i64_select_lt(const std::string& a, const std::string& b, const std::string& then,
                            const std::string& otherwise, const std::string& t,
                            const std::string& bool_t) {
    std::string less = fresh(), name = fresh();
    body_ += fmt::format(
        "    {} = \"stablehlo.compare\"({}, {}) {{comparison_direction = "
        "#stablehlo<comparison_direction LT>}} : ({}, {}) -> {}\n",
        less, a, b, t, t, bool_t);
    body_ += fmt::format("    {} = \"stablehlo.select\"({}, {}, {}) : ({}, {}, {}) -> {}\n", name,
                         less, then, otherwise, bool_t, t, t, t);
    return name;
  }

  // Edge and reflect padding: every output element gathers the operand element its position
  // maps to (clamped to the edge, or mirrored without repeating it).
  void pad_by_gather(ValueId id) {
    const ir::Node& n = g_.node(id);
    const auto& a = n.attr<ir::PadAttrs>();
    const ValueId x = n.inputs[0];
    const Shape& xs = g_.node(x).shape;
    const Shape out = n.shape.with_dtype(DType::i64);
    const int rank = out.rank();
    const std::string t = tensor_type(out),
                      bool_t = tensor_type(n.shape.with_dtype(DType::boolean));
    std::vector<std::string> columns;
    for (int d = 0; d < rank; ++d) {
      std::string ignored;
      const int64_t size = xs.size(d);
      std::string j = i64_op("subtract", iota(out, d, &ignored), i64_splat(a.low[d], t), t);
      if (a.mode == ir::PadMode::edge) {
        j = i64_op("maximum", i64_op("minimum", j, i64_splat(size - 1, t), t), i64_splat(0, t), t);
      } else {  // reflect
        j = i64_select_lt(j, i64_splat(0, t), i64_op("subtract", i64_splat(0, t), j, t), j, t,
                          bool_t);
        j = i64_select_lt(j, i64_splat(size, t), j,
                          i64_op("subtract", i64_splat(2 * (size - 1), t), j, t), t, bool_t);
      }
      columns.push_back(j);
    }
    std::string tuples_type;
    const std::string tuples = index_tuples(columns, out, &tuples_type);
    gather_elements(id, x, tuples, tuples_type);
  }

  // take_along: one element of x per index, at the index's own position on the other axes.
  void take_along(ValueId id) {
    const ir::Node& n = g_.node(id);
    const int axis = n.attr<ir::AxisAttrs>().axis;
    const ValueId x = n.inputs[0], idx = n.inputs[1];
    std::string tuples_type;
    const std::string tuples = full_indices(idx, axis, g_.node(x).shape.size(axis), &tuples_type);
    gather_elements(id, x, tuples, tuples_type);
  }

  // scatter along an axis: each update combined into x at its index, in order.
  void scatter(ValueId id) {
    const ir::Node& n = g_.node(id);
    const auto& a = n.attr<ir::ScatterAttrs>();
    const ValueId x = n.inputs[0], idx = n.inputs[1], updates = n.inputs[2];
    const int rank = g_.node(idx).shape.rank();
    std::string indices_type;
    const std::string indices =
        full_indices(idx, a.axis, g_.node(x).shape.size(a.axis), &indices_type);
    std::vector<int64_t> all;
    for (int d = 0; d < rank; ++d) all.push_back(d);
    const std::string s = scalar_type(n.shape.dtype());
    std::string combine;
    switch (a.reduce) {
      case ir::ScatterReduce::none:
        combine = fmt::format("      \"stablehlo.return\"(%b) : ({}) -> ()\n", s);
        break;
      case ir::ScatterReduce::add:
      case ir::ScatterReduce::mul:
        combine = fmt::format(
            "      %r = \"stablehlo.{1}\"(%a, %b) : ({0}, {0}) -> {0}\n"
            "      \"stablehlo.return\"(%r) : ({0}) -> ()\n",
            s, a.reduce == ir::ScatterReduce::add ? "add" : "multiply");
        break;
      case ir::ScatterReduce::max:
      case ir::ScatterReduce::min:  // the update where it is beyond: a NaN update is skipped
        combine = fmt::format(
            "      %take = \"stablehlo.compare\"({1}) {{comparison_direction = "
            "#stablehlo<comparison_direction LT>}} : ({0}, {0}) -> tensor<i1>\n"
            "      %r = \"stablehlo.select\"(%take, %b, %a) : (tensor<i1>, {0}, {0}) -> {0}\n"
            "      \"stablehlo.return\"(%r) : ({0}) -> ()\n",
            s, a.reduce == ir::ScatterReduce::max ? "%a, %b" : "%b, %a");
        break;
    }
    body_ += fmt::format(
        "    {0} = \"stablehlo.scatter\"({1}, {2}, {3}) ({{\n"
        "    ^bb0(%a: {4}, %b: {4}):\n{5}"
        "    }}) {{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [{6}], "
        "scatter_dims_to_operand_dims = [{6}], index_vector_dim = {7}>, indices_are_sorted = "
        "false, unique_indices = false}} : ({8}, {9}, {10}) -> {11}\n",
        name_[id], name_[x], indices, name_[updates], s, combine, fmt::join(all, ", "), rank,
        type(x), indices_type, type(updates), type(id));
  }

  // argmax and argmin: a reduction of (value, position) pairs by the order above.
  void arg_reduce(ValueId id) {
    const ir::Node& n = g_.node(id);
    const int axis = n.attr<ir::AxisAttrs>().axis;
    const ValueId x = n.inputs[0];
    const Shape& xs = g_.node(x).shape;
    const DType t = xs.dtype();
    std::string positions_type;
    const std::string positions = iota(xs, axis, &positions_type);
    const std::string s = scalar_type(t);
    const std::string init = scalar(limit(t, n.op != Op::argmax), t),
                      zero = scalar("0", DType::i64);
    std::vector<Dim> kept;
    for (int a = 0; a < xs.rank(); ++a) {
      if (a != axis) kept.push_back(xs.dim(a));
    }
    const Shape reduced(t, kept);
    const std::string values_type = tensor_type(reduced),
                      index_type = tensor_type(reduced.with_dtype(DType::i64));
    const std::string r = fresh();
    body_ += fmt::format(
        "    {0}:2 = \"stablehlo.reduce\"({1}, {2}, {3}, {4}) ({{\n"
        "    ^bb0(%av: {5}, %ai: tensor<i64>, %bv: {5}, %bi: tensor<i64>):\n{6}"
        "      %v = \"stablehlo.select\"(%before, %av, %bv) : (tensor<i1>, {5}, {5}) -> {5}\n"
        "      %i = \"stablehlo.select\"(%before, %ai, %bi) : (tensor<i1>, tensor<i64>, "
        "tensor<i64>) -> tensor<i64>\n"
        "      \"stablehlo.return\"(%v, %i) : ({5}, tensor<i64>) -> ()\n"
        "    }}) {{dimensions = array<i64: {7}>}} : ({8}, {9}, {5}, tensor<i64>) -> ({10}, {11})\n",
        r, name_[x], positions, init, zero, s, order(t, n.op == Op::argmax), axis, type(x),
        positions_type, values_type, index_type);
    const std::string index = fresh();
    body_ += fmt::format("    {} = \"stablehlo.reshape\"({}#1) : ({}) -> {}\n", index, r,
                         index_type, tensor_type(n.shape.with_dtype(DType::i64)));
    convert_into(id, index, tensor_type(n.shape.with_dtype(DType::i64)));
  }

  // The first k of a stable sort along the axis: sort (value, position) pairs, keep k.
  void argsort(ValueId id) {
    const ir::Node& n = g_.node(id);
    const auto& a = n.attr<ir::ArgsortAttrs>();
    const ValueId x = n.inputs[0];
    const Shape& xs = g_.node(x).shape;
    const DType t = xs.dtype();
    std::string positions_type;
    const std::string positions = iota(xs, a.axis, &positions_type);
    const std::string s = scalar_type(t), sorted = fresh();
    body_ += fmt::format(
        "    {0}:2 = \"stablehlo.sort\"({1}, {2}) ({{\n"
        "    ^bb0(%av: {3}, %bv: {3}, %ai: tensor<i64>, %bi: tensor<i64>):\n{4}"
        "      \"stablehlo.return\"(%before) : (tensor<i1>) -> ()\n"
        "    }}) {{dimension = {5} : i64, is_stable = true}} : ({6}, {7}) -> ({6}, {7})\n",
        sorted, name_[x], positions, s, order(t, a.descending), a.axis, type(x), positions_type);
    std::vector<int64_t> starts(xs.rank(), 0), limits, strides(xs.rank(), 1);
    for (int d = 0; d < xs.rank(); ++d) limits.push_back(d == a.axis ? a.k : xs.size(d));
    const std::string first = fresh(), first_type = tensor_type(n.shape.with_dtype(DType::i64));
    body_ += fmt::format(
        "    {} = \"stablehlo.slice\"({}#1) {{start_indices = {}, limit_indices = {}, strides = "
        "{}}} : ({}) -> {}\n",
        first, sorted, i64_array(starts), i64_array(limits), i64_array(strides), positions_type,
        first_type);
    convert_into(id, first, first_type);
  }

  // Running sums along the axis: a window over everything before (or after, reversed), on
  // the operand shifted by one for exclusive sums; halves sum in f32, as on the CPU.
  void cumsum(ValueId id) {
    const ir::Node& n = g_.node(id);
    const auto& a = n.attr<ir::AxisAttrs>();
    const ValueId x = n.inputs[0];
    const Shape& xs = g_.node(x).shape;
    const DType t = xs.dtype() == DType::f16 || xs.dtype() == DType::bf16 ? DType::f32 : xs.dtype();
    const std::string work_type = tensor_type(xs.with_dtype(t));
    std::string value = name_[x];
    if (t != xs.dtype()) {
      value = fresh();
      body_ += fmt::format("    {} = \"stablehlo.convert\"({}) : ({}) -> {}\n", value, name_[x],
                           type(x), work_type);
    }
    const int64_t size = xs.size(a.axis);
    if (a.exclusive) {  // x shifted by one along the axis, a zero coming in
      std::vector<int64_t> low(xs.rank(), 0), high(xs.rank(), 0), interior(xs.rank(), 0);
      (a.reverse ? high : low)[a.axis] = 1;
      (a.reverse ? low : high)[a.axis] = -1;
      const std::string shifted = fresh(), zero = scalar(scalar_literal(0, t), t);
      body_ += fmt::format(
          "    {} = \"stablehlo.pad\"({}, {}) {{edge_padding_low = {}, edge_padding_high = {}, "
          "interior_padding = {}}} : ({}, {}) -> {}\n",
          shifted, value, zero, i64_array(low), i64_array(high), i64_array(interior), work_type,
          scalar_type(t), work_type);
      value = shifted;
    }
    std::vector<int64_t> window(xs.rank(), 1), strides(xs.rank(), 1);
    window[a.axis] = size;
    std::vector<std::string> padding;
    for (int d = 0; d < xs.rank(); ++d) {
      const int64_t before = d == a.axis && !a.reverse ? size - 1 : 0;
      const int64_t after = d == a.axis && a.reverse ? size - 1 : 0;
      padding.push_back(fmt::format("[{}, {}]", before, after));
    }
    const std::string s = scalar_type(t), zero = scalar(scalar_literal(0, t), t);
    const std::string sums = t == xs.dtype() ? name_[id] : fresh();
    body_ += fmt::format(
        "    {0} = \"stablehlo.reduce_window\"({1}, {2}) ({{\n"
        "    ^bb0(%a: {3}, %b: {3}):\n"
        "      %r = \"stablehlo.add\"(%a, %b) : ({3}, {3}) -> {3}\n"
        "      \"stablehlo.return\"(%r) : ({3}) -> ()\n"
        "    }}) {{window_dimensions = {4}, window_strides = {5}, padding = dense<[{6}]> : "
        "tensor<{7}x2xi64>}} : ({8}, {3}) -> {8}\n",
        sums, value, zero, s, i64_array(window), i64_array(strides), fmt::join(padding, ", "),
        xs.rank(), work_type);
    if (t != xs.dtype()) convert_into(id, sums, work_type);
  }

  void node(ValueId id) {
    const ir::Node& n = g_.node(id);
    const DType out = n.shape.dtype();
    if (const char* direction = comparison(n.op)) {
      emit(
          id, "compare", n.inputs,
          fmt::format("{{comparison_direction = #stablehlo<comparison_direction {}>}}", direction));
      return;
    }
    if (n.op == Op::is_nan) {  // x != x
      emit(id, "compare", {n.inputs[0], n.inputs[0]},
           "{comparison_direction = #stablehlo<comparison_direction NE>}");
      return;
    }
    if (const char* name = elementwise_name(n.op)) {
      emit(id, name, n.inputs);
      return;
    }
    const std::string lowest = limit(out, false), highest = limit(out, true);
    switch (n.op) {
      case Op::constant:
        return constant(id);
      case Op::iota:
        return emit(id, "iota", {},
                    fmt::format("{{iota_dimension = {} : i64}}", n.attr<ir::AxisAttrs>().axis));
      case Op::broadcast:
        return emit(
            id, "broadcast_in_dim", n.inputs,
            fmt::format("{{broadcast_dimensions = {}}}", i64_array(n.attr<ir::AxesAttrs>().axes)));
      case Op::reshape:
        return emit(id, "reshape", n.inputs);
      case Op::transpose:
        return emit(id, "transpose", n.inputs,
                    fmt::format("{{permutation = {}}}", i64_array(n.attr<ir::AxesAttrs>().axes)));
      case Op::slice: {
        const auto& a = n.attr<ir::SliceAttrs>();
        return emit(id, "slice", n.inputs,
                    fmt::format("{{start_indices = {}, limit_indices = {}, strides = {}}}",
                                i64_array(a.starts), i64_array(a.limits), i64_array(a.strides)));
      }
      case Op::dynamic_slice: {
        std::vector<int64_t> sizes;
        for (int a = 0; a < n.shape.rank(); ++a) sizes.push_back(n.shape.size(a));
        return emit(id, "dynamic_slice", n.inputs,
                    fmt::format("{{slice_sizes = {}}}", i64_array(sizes)));
      }
      case Op::dynamic_update_slice:
        return emit(id, "dynamic_update_slice", n.inputs);
      case Op::concatenate:
        return emit(id, "concatenate", n.inputs,
                    fmt::format("{{dimension = {} : i64}}", n.attr<ir::AxisAttrs>().axis));
      case Op::pad: {
        const auto& a = n.attr<ir::PadAttrs>();
        if (a.mode != ir::PadMode::constant) return pad_by_gather(id);
        return emit(id, "pad", n.inputs,
                    fmt::format("{{edge_padding_low = {}, edge_padding_high = {}, "
                                "interior_padding = {}}}",
                                i64_array(a.low), i64_array(a.high),
                                i64_array(std::vector<int64_t>(a.low.size(), 0))));
      }
      case Op::gather:
        return gather(id);
      case Op::argmax:
      case Op::argmin:
        return arg_reduce(id);
      case Op::argsort:
        return argsort(id);
      case Op::cumsum:
        return cumsum(id);
      case Op::take_along:
        return take_along(id);
      case Op::scatter:
        return scatter(id);
      case Op::convolution:
        return convolution(id);
      case Op::erf:  // StableHLO has no erf; CHLO's, which plugins decompose, does
        body_ += fmt::format("    {} = \"chlo.erf\"({}) : ({}) -> {}\n", name_[id],
                             name_[n.inputs[0]], type(n.inputs[0]), type(id));
        return;
      case Op::reduce_sum:
        return reduce(id, n.attr<ir::AxesAttrs>().axes, "add", scalar_literal(0, out));
      case Op::reduce_prod:
        return reduce(id, n.attr<ir::AxesAttrs>().axes, "multiply", scalar_literal(1, out));
      case Op::reduce_max:
        return reduce(id, n.attr<ir::AxesAttrs>().axes, "maximum", lowest);
      case Op::reduce_min:
        return reduce(id, n.attr<ir::AxesAttrs>().axes, "minimum", highest);
      case Op::dot: {
        const auto& a = n.attr<ir::DotAttrs>();
        for (ValueId in : n.inputs) {
          PRISM_CHECK(g_.node(in).shape.dtype() == out,
                      "pjrt: a product of {} into {} has no StableHLO lowering yet ({})",
                      name(g_.node(in).shape.dtype()), name(out), ir::print(g_, id));
        }
        return emit(id, "dot_general", n.inputs,
                    fmt::format("{{dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions "
                                "= [{}], rhs_batching_dimensions = [{}], "
                                "lhs_contracting_dimensions = [{}], rhs_contracting_dimensions = "
                                "[{}]>}}",
                                fmt::join(a.lhs_batch, ", "), fmt::join(a.rhs_batch, ", "),
                                fmt::join(a.lhs_contract, ", "), fmt::join(a.rhs_contract, ", ")));
      }
      default:
        break;
    }
    fail("pjrt: no StableHLO lowering for {} yet ({})", ir::op_name(n.op), ir::print(g_, id));
  }

  // The smallest or largest value of t (infinities for floats), as a literal.
  static std::string limit(DType t, bool largest) {
    if (t == DType::boolean) return largest ? "true" : "false";
    if (is_float(t)) {
      return scalar_literal(largest ? std::numeric_limits<double>::infinity()
                                    : -std::numeric_limits<double>::infinity(),
                            t);
    }
    return with_integer_type(t, [&](auto zero) {
      using T = decltype(zero);
      // Unary + prints 8-bit integers as numbers, not characters.
      return fmt::format(
          "{}", +(largest ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min()));
    });
  }

  const ir::Graph& g_;
  const std::map<int, int>& aliases_;
  const ModuleSharding* sharding_;
  std::vector<std::string> name_;
  std::string body_;
  int fresh_ = 0;
};

}  // namespace

std::string to_stablehlo(const ir::Graph& graph, const std::map<int, int>& aliases) {
  return Printer(graph, aliases)();
}

std::string to_stablehlo(const ir::Graph& graph, const std::map<int, int>& aliases,
                         const ModuleSharding& sharding) {
  return Printer(graph, aliases, &sharding)();
}

std::string hlo_sharding(const std::vector<int>& split, const Mesh& mesh) {
  std::vector<int64_t> tiles;
  std::vector<bool> used(mesh.axes().size(), false);
  bool any = false;
  for (int a : split) {
    tiles.push_back(a >= 0 ? mesh.axes()[a].size : 1);
    if (a >= 0) used[a] = any = true;
  }
  if (!any) return "{replicated}";
  int64_t replicas = 1;
  for (size_t a = 0; a < used.size(); ++a) {
    if (!used[a]) replicas *= mesh.axes()[a].size;
  }
  if (replicas > 1) tiles.push_back(replicas);
  // Every tile in row-major order, and the device at its position: its coordinate along each
  // split dim's axis, the replica's along the unused axes.
  int64_t count = 1;
  for (int64_t t : tiles) count *= t;
  std::vector<int64_t> ids;
  for (int64_t tile = 0; tile < count; ++tile) {
    std::vector<int64_t> coord(mesh.axes().size(), 0);
    int64_t rest = tile;
    std::vector<int64_t> at(tiles.size());
    for (int d = static_cast<int>(tiles.size()) - 1; d >= 0; --d) {
      at[d] = rest % tiles[d];
      rest /= tiles[d];
    }
    for (size_t d = 0; d < split.size(); ++d) {
      if (split[d] >= 0) coord[split[d]] = at[d];
    }
    int64_t replica = replicas > 1 ? at.back() : 0;
    for (int a = static_cast<int>(used.size()) - 1; a >= 0; --a) {
      if (used[a]) continue;
      coord[a] = replica % mesh.axes()[a].size;
      replica /= mesh.axes()[a].size;
    }
    int64_t id = 0;
    for (size_t a = 0; a < coord.size(); ++a) id = id * mesh.axes()[a].size + coord[a];
    ids.push_back(id);
  }
  return fmt::format("{{devices=[{}]{}{}}}", fmt::join(tiles, ","), fmt::join(ids, ","),
                     replicas > 1 ? " last_tile_dim_replicate" : "");
}

std::string sdy_mesh(const Mesh& mesh) {
  std::vector<std::string> axes;
  for (const MeshAxis& axis : mesh.axes())
    axes.push_back(fmt::format("\"{}\"={}", axis.name, axis.size));
  return fmt::format("<[{}]>", fmt::join(axes, ", "));
}

std::string sdy_sharding(const std::vector<int>& split, const Mesh& mesh) {
  std::vector<std::string> dims;
  for (int a : split)
    dims.push_back(a >= 0 ? fmt::format("{{\"{}\"}}", mesh.axes()[a].name) : "{}");
  return fmt::format("#sdy.sharding<@mesh, [{}]>", fmt::join(dims, ", "));
}

}  // namespace prism::pjrt
