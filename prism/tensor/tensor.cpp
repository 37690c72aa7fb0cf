// Tensor creation, the tracer, elementwise ops with broadcasting by tag, reductions and dot.
#include "prism/tensor/tensor.h"

#include <atomic>
#include <cmath>
#include <numbers>

#include "prism/core/error.h"
#include "prism/tensor/tracer.h"

namespace prism {

using ir::Node;
using ir::Op;
using ir::ValueId;

namespace {

thread_local Tracer* g_current = nullptr;
std::atomic<uint64_t> g_next_trace_id{1};

HostBuffer scalar_buffer(double value, DType dtype) {
  HostBuffer f64 = HostBuffer::from<double>(Shape::scalar(DType::f64), {value});
  return f64.convert(dtype);
}

}  // namespace

std::string TagList::str() const {
  std::string s;
  for (Tag t : tags_) s += fmt::format("{}\"{}\"", s.empty() ? "" : ",", t.str());
  return tags_.size() == 1 ? s : "{" + s + "}";
}

// ---------------------------------------------------------------------------------------------
// Tracer

Tracer::Tracer() : id_(g_next_trace_id++), previous_(g_current) { g_current = this; }
Tracer::~Tracer() { g_current = previous_; }

Tracer& Tracer::current(std::string_view op) {
  if (!g_current) {
    fail("{}: no trace is active (tensor ops are recorded inside prism::compile or prism::run)",
         op);
  }
  return *g_current;
}

bool Tracer::active() { return g_current != nullptr; }

Tensor Tracer::input(int index, const Shape& shape) {
  return wrap(graph_.add(Node{Op::input, shape, {}, ir::InputAttrs{index}}));
}

ValueId Tracer::parameter(const ir::ParameterAttrs& p, const Shape& shape) {
  auto it = parameters_.find(p.name);
  if (it != parameters_.end()) {
    const Node& known = graph_.node(it->second);
    PRISM_CHECK(known.shape == shape, "parameter \"{}\" used as {} and as {}", p.name,
                known.shape.str(), shape.str());
    const std::string& sharding = known.attr<ir::ParameterAttrs>().sharding;
    PRISM_CHECK(sharding == p.sharding, "parameter \"{}\" split as {} and as {}", p.name,
                sharding.empty() ? "{}" : sharding, p.sharding.empty() ? "{}" : p.sharding);
    return it->second;
  }
  ValueId id = graph_.add(Node{Op::parameter, shape, {}, p});
  parameters_.emplace(p.name, id);
  return id;
}

Tensor Tracer::wrap(ValueId id) {
  Tensor t;
  t.shape_ = graph_.node(id).shape;
  t.id_ = id;
  t.trace_ = id_;
  return t;
}

ValueId Tracer::use(const Tensor& t, std::string_view op) {
  if (t.param_) return parameter(*t.param_, t.shape_);
  PRISM_CHECK(t.id_ >= 0, "{}: uninitialized tensor", op);
  PRISM_CHECK(t.trace_ == id_, "{}: tensor {} belongs to another trace", op, t.shape_.str());
  return t.id_;
}

ValueId Tensor::id() const { return Tracer::current("tensor").use(*this, "tensor"); }

Tensor make_node(Node node) {
  Tracer& tracer = Tracer::current(ir::op_name(node.op));
  return tracer.wrap(tracer.graph().add(std::move(node)));
}

// ---------------------------------------------------------------------------------------------
// Creation

Tensor Tensor::parameter(std::string name, const Shape& shape, const Sharding& sharding) {
  Tensor t;
  t.shape_ = shape;
  for (const Sharding::Split& s : sharding.splits()) {
    PRISM_CHECK(shape.has(s.tag), "parameter \"{}\": split tag '{}' is not one of {}", name,
                s.tag.str(), shape.str());
  }
  t.param_ = std::make_shared<const ir::ParameterAttrs>(
      ir::ParameterAttrs{std::move(name), sharding.replicated() ? "" : sharding.str()});
  return t;
}

Tensor Tensor::constant(const HostBuffer& data) {
  auto bytes = std::make_shared<std::vector<std::byte>>(data.bytes().begin(), data.bytes().end());
  return make_node(Node{Op::constant, data.shape(), {}, ir::ConstantAttrs{std::move(bytes)}});
}

Tensor Tensor::scalar(double value, DType dtype) { return constant(scalar_buffer(value, dtype)); }

Tensor Tensor::full(const Shape& shape, double value) {
  return scalar(value, shape.dtype()).broadcast_to(shape);
}

Tensor Tensor::iota(const Shape& shape, Tag axis) {
  return make_node(Node{Op::iota, shape, {}, ir::AxisAttrs{shape.axis(axis, "iota")}});
}

void require_float(std::string_view op, const Tensor& x) {
  PRISM_CHECK(is_float(x.dtype()), "{}: needs a floating-point operand, got {}", op,
              x.shape().str());
}

// ---------------------------------------------------------------------------------------------
// Elementwise

namespace {

Tensor unary(Op op, const Tensor& x, DType out) {
  ValueId in = Tracer::current(ir::op_name(op)).use(x, ir::op_name(op));
  return make_node(Node{op, x.shape().with_dtype(out), {in}, {}});
}

Tensor unary_float(Op op, const Tensor& x) {
  require_float(ir::op_name(op), x);
  return unary(op, x, x.dtype());
}

// The shape two operands broadcast to: a's dims, then b's dims that a lacks.
Shape broadcast_shape(std::string_view op, const Shape& a, const Shape& b, DType dtype) {
  if (a.same_dims(b)) return a.with_dtype(dtype);
  auto unnamed = [](const Shape& s) {
    for (const Dim& d : s.dims())
      if (d.tag.empty()) return true;
    return false;
  };
  if (unnamed(a) || unnamed(b)) {
    fail("{}: cannot broadcast {} and {} by tag (unnamed dimensions)", op, a.dims_str(),
         b.dims_str());
  }
  std::vector<Dim> dims(a.dims().begin(), a.dims().end());
  for (const Dim& d : b.dims()) {
    int i = a.find(d.tag);
    if (i < 0) {
      dims.push_back(d);
    } else if (a.size(i) != d.size) {
      fail("{}: tag \"{}\" is {} in lhs {} but {} in rhs {}", op, d.tag.str(), a.size(i),
           a.dims_str(), d.size, b.dims_str());
    }
  }
  return Shape(dtype, dims, op);
}

void check_same_dtype(std::string_view op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) {
    fail("{}: dtype {} in lhs {} but {} in rhs {}", op, name(a.dtype()), a.shape().dims_str(),
         name(b.dtype()), b.shape().dims_str());
  }
}

Tensor binary(Op op, const Tensor& a, const Tensor& b, DType out) {
  std::string_view name = ir::op_name(op);
  Tracer& tracer = Tracer::current(name);
  Shape shape = broadcast_shape(name, a.shape(), b.shape(), out);
  Tensor ba = a.broadcast_to(shape), bb = b.broadcast_to(shape);
  return make_node(Node{op, shape, {tracer.use(ba, name), tracer.use(bb, name)}, {}});
}

Tensor arithmetic(Op op, const Tensor& a, const Tensor& b) {
  check_same_dtype(ir::op_name(op), a, b);
  return binary(op, a, b, a.dtype());
}

Tensor compare(Op op, const Tensor& a, const Tensor& b) {
  check_same_dtype(ir::op_name(op), a, b);
  return binary(op, a, b, DType::boolean);
}

Tensor logical(Op op, const Tensor& a, const Tensor& b) {
  PRISM_CHECK(a.dtype() == DType::boolean && b.dtype() == DType::boolean,
              "{}: needs bool operands, got {} and {}", ir::op_name(op), a.shape().str(),
              b.shape().str());
  return binary(op, a, b, DType::boolean);
}

}  // namespace

Tensor Tensor::neg() const { return unary(Op::neg, *this, dtype()); }
Tensor Tensor::abs() const { return unary(Op::abs, *this, dtype()); }
Tensor Tensor::exp() const { return unary_float(Op::exp, *this); }
Tensor Tensor::log() const { return unary_float(Op::log, *this); }
Tensor Tensor::log1p() const { return unary_float(Op::log1p, *this); }
Tensor Tensor::sqrt() const { return unary_float(Op::sqrt, *this); }
Tensor Tensor::rsqrt() const { return unary_float(Op::rsqrt, *this); }
Tensor Tensor::tanh() const { return unary_float(Op::tanh, *this); }
Tensor Tensor::logistic() const { return unary_float(Op::logistic, *this); }
Tensor Tensor::sin() const { return unary_float(Op::sin, *this); }
Tensor Tensor::cos() const { return unary_float(Op::cos, *this); }
Tensor Tensor::erf() const { return unary_float(Op::erf, *this); }
Tensor Tensor::floor() const { return unary_float(Op::floor, *this); }
Tensor Tensor::ceil() const { return unary_float(Op::ceil, *this); }
Tensor Tensor::round() const { return unary_float(Op::round, *this); }
Tensor Tensor::sign() const { return unary(Op::sign, *this, dtype()); }
Tensor Tensor::is_nan() const {
  require_float("is_nan", *this);
  return unary(Op::is_nan, *this, DType::boolean);
}
Tensor Tensor::logical_not() const {
  PRISM_CHECK(dtype() == DType::boolean, "logical_not: needs a bool operand, got {}",
              shape().str());
  return unary(Op::logical_not, *this, DType::boolean);
}
Tensor Tensor::convert(DType to) const {
  if (to == dtype()) return *this;
  return unary(Op::convert, *this, to);
}

Tensor Tensor::relu() const { return maximum(*this, Tensor::scalar(0, dtype())); }
Tensor Tensor::silu() const { return *this * logistic(); }
Tensor Tensor::gelu(bool tanh_approximation) const {
  const Tensor& x = *this;
  if (tanh_approximation) {
    double k = std::sqrt(2.0 / std::numbers::pi);
    return 0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh());
  }
  return 0.5 * x * (1.0 + (x * (1.0 / std::numbers::sqrt2)).erf());
}

Tensor operator+(const Tensor& a, const Tensor& b) { return arithmetic(Op::add, a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return arithmetic(Op::sub, a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return arithmetic(Op::mul, a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return arithmetic(Op::div, a, b); }
Tensor operator+(const Tensor& a, double b) { return a + Tensor::scalar(b, a.dtype()); }
Tensor operator-(const Tensor& a, double b) { return a - Tensor::scalar(b, a.dtype()); }
Tensor operator*(const Tensor& a, double b) { return a * Tensor::scalar(b, a.dtype()); }
Tensor operator/(const Tensor& a, double b) { return a / Tensor::scalar(b, a.dtype()); }
Tensor operator+(double a, const Tensor& b) { return Tensor::scalar(a, b.dtype()) + b; }
Tensor operator-(double a, const Tensor& b) { return Tensor::scalar(a, b.dtype()) - b; }
Tensor operator*(double a, const Tensor& b) { return Tensor::scalar(a, b.dtype()) * b; }
Tensor operator/(double a, const Tensor& b) { return Tensor::scalar(a, b.dtype()) / b; }
Tensor pow(const Tensor& a, const Tensor& b) { return arithmetic(Op::pow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return arithmetic(Op::max, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return arithmetic(Op::min, a, b); }
Tensor rem(const Tensor& a, const Tensor& b) { return arithmetic(Op::rem, a, b); }
Tensor atan2(const Tensor& a, const Tensor& b) { return arithmetic(Op::atan2, a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return logical(Op::logical_and, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return logical(Op::logical_or, a, b); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return logical(Op::logical_xor, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return compare(Op::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(Op::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(Op::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(Op::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(Op::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(Op::ge, a, b); }

Tensor select(const Tensor& cond, const Tensor& on_true, const Tensor& on_false) {
  PRISM_CHECK(cond.dtype() == DType::boolean, "select: condition must be bool, got {}",
              cond.shape().str());
  check_same_dtype("select", on_true, on_false);
  Tracer& tracer = Tracer::current("select");
  Shape values = broadcast_shape("select", on_true.shape(), on_false.shape(), on_true.dtype());
  Shape shape = broadcast_shape("select", values, cond.shape(), on_true.dtype());
  Tensor c = cond.broadcast_to(shape.with_dtype(DType::boolean));
  Tensor t = on_true.broadcast_to(shape), f = on_false.broadcast_to(shape);
  return make_node(Node{Op::select,
                        shape,
                        {tracer.use(c, "select"), tracer.use(t, "select"), tracer.use(f, "select")},
                        {}});
}

// ---------------------------------------------------------------------------------------------
// Reductions

namespace {

Tensor reduce(Op op, const Tensor& x, const TagList& tags) {
  std::string_view name = ir::op_name(op);
  std::vector<int> axes;
  for (Tag t : tags) {
    int a = x.shape().axis(t, name);
    for (int b : axes) PRISM_CHECK(a != b, "{}: tag \"{}\" given twice", name, t.str());
    axes.push_back(a);
  }
  std::sort(axes.begin(), axes.end());
  std::vector<Dim> dims;
  for (int i = 0; i < x.rank(); ++i) {
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) dims.push_back(x.shape().dim(i));
  }
  ValueId in = Tracer::current(name).use(x, name);
  return make_node(Node{op, Shape(x.dtype(), dims, name), {in}, ir::AxesAttrs{axes}});
}

Tensor arg_reduce(Op op, const Tensor& x, Tag tag, DType index_dtype) {
  std::string_view name = ir::op_name(op);
  PRISM_CHECK(is_integer(index_dtype), "{}: index dtype must be an integer type, got {}", name,
              prism::name(index_dtype));
  int axis = x.shape().axis(tag, name);
  std::vector<Dim> dims;
  for (int i = 0; i < x.rank(); ++i) {
    if (i != axis) dims.push_back(x.shape().dim(i));
  }
  ValueId in = Tracer::current(name).use(x, name);
  return make_node(Node{op, Shape(index_dtype, dims, name), {in}, ir::AxisAttrs{axis}});
}

}  // namespace

Tensor Tensor::sum(TagList tags) const { return reduce(Op::reduce_sum, *this, tags); }
Tensor Tensor::max(TagList tags) const { return reduce(Op::reduce_max, *this, tags); }
Tensor Tensor::min(TagList tags) const { return reduce(Op::reduce_min, *this, tags); }
Tensor Tensor::prod(TagList tags) const { return reduce(Op::reduce_prod, *this, tags); }
Tensor Tensor::mean(TagList tags) const {
  require_float("mean", *this);
  int64_t n = 1;
  for (Tag t : tags) n *= shape_.size(shape_.axis(t, "mean"));
  return sum(tags) * (1.0 / static_cast<double>(n));
}
Tensor Tensor::argmax(Tag tag, DType index_dtype) const {
  return arg_reduce(Op::argmax, *this, tag, index_dtype);
}
Tensor Tensor::argmin(Tag tag, DType index_dtype) const {
  return arg_reduce(Op::argmin, *this, tag, index_dtype);
}

// ---------------------------------------------------------------------------------------------
// Dot

Tensor Tensor::dot(const Tensor& rhs, TagList contract) const {
  const Shape& a = shape_;
  const Shape& b = rhs.shape();
  check_same_dtype("dot", *this, rhs);
  ir::DotAttrs attrs;
  for (Tag t : contract) {
    int i = a.find(t), j = b.find(t);
    if (i < 0) fail("dot: contracting tag \"{}\" missing in lhs {}", t.str(), a.dims_str());
    if (j < 0) fail("dot: contracting tag \"{}\" missing in rhs {}", t.str(), b.dims_str());
    if (a.size(i) != b.size(j)) {
      fail("dot: tag \"{}\" is {} in lhs {} but {} in rhs {}", t.str(), a.size(i), a.dims_str(),
           b.size(j), b.dims_str());
    }
    attrs.lhs_contract.push_back(i);
    attrs.rhs_contract.push_back(j);
  }
  auto contracted = [&](Tag t) {
    for (Tag c : contract)
      if (c == t) return true;
    return false;
  };
  std::vector<Dim> dims;
  for (int i = 0; i < a.rank(); ++i) {
    Tag t = a.tag(i);
    int j = b.find(t);
    if (j < 0 || contracted(t)) continue;
    if (a.size(i) != b.size(j)) {
      fail("dot: batch tag \"{}\" is {} in lhs {} but {} in rhs {}", t.str(), a.size(i),
           a.dims_str(), b.size(j), b.dims_str());
    }
    attrs.lhs_batch.push_back(i);
    attrs.rhs_batch.push_back(j);
    dims.push_back(a.dim(i));
  }
  for (int i = 0; i < a.rank(); ++i) {
    if (!contracted(a.tag(i)) && !b.has(a.tag(i))) dims.push_back(a.dim(i));
  }
  for (int j = 0; j < b.rank(); ++j) {
    if (!contracted(b.tag(j)) && !a.has(b.tag(j))) dims.push_back(b.dim(j));
  }
  Tracer& tracer = Tracer::current("dot");
  ValueId l = tracer.use(*this, "dot"), r = tracer.use(rhs, "dot");
  return make_node(Node{Op::dot, Shape(dtype(), dims, "dot"), {l, r}, std::move(attrs)});
}

}  // namespace prism
