// A fusion group as one kernel: each thread computes output elements in registers of the
// compute type (double, float or long long), reading broadcast operands through zero strides.
// f16/bf16 results are rounded after every op, as separate kernels would, so that results
// match the CPU backend's fused loops.
#include <algorithm>
#include <array>

#include "prism/backends/cuda/codegen.h"
#include "prism/core/error.h"

namespace prism::cuda::detail {

using ir::Op;

namespace {

bool is_compare(Op op) {
  return op == Op::eq || op == Op::ne || op == Op::lt || op == Op::le || op == Op::gt ||
         op == Op::ge;
}

std::string compare_symbol(Op op) {
  switch (op) {
    case Op::eq:
      return "==";
    case Op::ne:
      return "!=";
    case Op::lt:
      return "<";
    case Op::le:
      return "<=";
    case Op::gt:
      return ">";
    default:
      return ">=";
  }
}

// The C expression of a unary op on `a` in compute type `type` (double, float or i64).
std::string unary(Op op, const std::string& type, const std::string& a, DType dtype) {
  bool f = type == "float", d = type == "double";
  if (f || d) {
    auto fn = [&](const char* base) { return fmt::format("{}{}({})", base, f ? "f" : "", a); };
    std::string one = f ? "1.0f" : "1.0";
    switch (op) {
      case Op::neg:
        return "-" + a;
      case Op::abs:
        return fn("fabs");
      case Op::exp:
        return fn("exp");
      case Op::log:
        return fn("log");
      case Op::log1p:
        return fn("log1p");
      case Op::sqrt:
        return fn("sqrt");
      case Op::rsqrt:
        return fmt::format("{} / {}", one, fn("sqrt"));
      case Op::tanh:
        return fn("tanh");
      case Op::logistic:
        return fmt::format("{} / ({} + {}{}(-{}))", one, one, "exp", f ? "f" : "", a);
      case Op::sin:
        return fn("sin");
      case Op::cos:
        return fn("cos");
      case Op::erf:
        return fn("erf");
      case Op::floor:
        return fn("floor");
      case Op::ceil:
        return fn("ceil");
      case Op::round:  // half to even
        return fn("rint");
      case Op::sign:
        return fmt::format("({0} != {0} ? {0} : ({1})(({0} > 0) - ({0} < 0)))", a, type);
      default:
        break;
    }
  } else {
    switch (op) {
      case Op::neg:
        return "-" + a;
      case Op::abs:
        return fmt::format("({0} < 0 ? -{0} : {0})", a);
      case Op::sign:
        return fmt::format("(i64)(({0} > 0) - ({0} < 0))", a);
      case Op::logical_not:
        return fmt::format("(i64)!{}", a);
      default:
        break;
    }
  }
  fail("cuda: elementwise {} is not defined for {}", ir::op_name(op), name(dtype));
}

std::string binary(Op op, const std::string& type, const std::string& a, const std::string& b,
                   DType dtype) {
  bool fl = type != "i64";
  std::string suffix = type == "float" ? "f" : "";
  switch (op) {
    case Op::add:
      return fmt::format("{} + {}", a, b);
    case Op::sub:
      return fmt::format("{} - {}", a, b);
    case Op::mul:
      return fmt::format("{} * {}", a, b);
    case Op::max:  // NaN propagates (from either side)
      return fl ? fmt::format("(({0} > {1} || {0} != {0}) ? {0} : {1})", a, b)
                : fmt::format("({0} > {1} ? {0} : {1})", a, b);
    case Op::min:
      return fl ? fmt::format("(({0} < {1} || {0} != {0}) ? {0} : {1})", a, b)
                : fmt::format("({0} < {1} ? {0} : {1})", a, b);
    default:
      break;
  }
  if (fl) {
    switch (op) {
      case Op::div:
        return fmt::format("{} / {}", a, b);
      case Op::pow:
        return fmt::format("pow{}({}, {})", suffix, a, b);
      case Op::rem:
        return fmt::format("fmod{}({}, {})", suffix, a, b);
      case Op::atan2:
        return fmt::format("atan2{}({}, {})", suffix, a, b);
      default:
        break;
    }
  } else {
    switch (op) {
      case Op::div:  // truncates toward zero; x/0 is 0 rather than a trap
        return fmt::format("({1} == 0 ? 0LL : {0} / {1})", a, b);
      case Op::rem:
        return fmt::format("({1} == 0 ? 0LL : {0} % {1})", a, b);
      case Op::pow:
        return fmt::format("prism_ipow({}, {})", a, b);
      case Op::logical_and:
        return fmt::format("(i64)({} && {})", a, b);
      case Op::logical_or:
        return fmt::format("(i64)({} || {})", a, b);
      case Op::logical_xor:
        return fmt::format("(i64)(({} != 0) != ({} != 0))", a, b);
      default:
        break;
    }
  }
  fail("cuda: elementwise {} is not defined for {}", ir::op_name(op), name(dtype));
}

}  // namespace

std::vector<KernelCode> generate_elementwise(const ir::Graph& g, const compiler::FusionPlan& plan,
                                             ir::ValueId id, const std::string& kname) {
  const compiler::FusionGroup& group = plan.groups[plan.group_of[id]];
  PRISM_CHECK(group.root == id, "cuda: %{} is inside a fusion group, not its root", id);
  const Shape out = g.node(id).shape;
  std::vector<ir::ValueId> sources = step_reads(g, plan, id);
  std::vector<DType> source_dtypes;
  for (ir::ValueId s : sources) source_dtypes.push_back(g.node(s).shape.dtype());

  std::string body;
  bool need_coords = false;
  std::vector<std::string> reg(g.size());
  int next = 0;
  // Loads: each operand read through its chain of virtual broadcasts with one stride per
  // output axis (0 where broadcast).
  std::string loads;
  for (ir::ValueId operand : group.operands) {
    const compiler::OperandRead read = compiler::read_through(g, plan, operand, out);
    const ir::ValueId src = read.source;
    const Shape& s = g.node(src).shape;
    int source = static_cast<int>(std::find(sources.begin(), sources.end(), src) - sources.begin());
    std::string index = "i";
    if (src != operand) {
      std::string offset;
      for (int i = 0; i < out.rank(); ++i) {
        if (read.strides[i] == 0 || out.size(i) == 1) continue;
        offset += fmt::format("{}c{} * {}LL", offset.empty() ? "" : " + ", i, read.strides[i]);
      }
      index = offset.empty() ? "0" : offset;
      need_coords = true;
    }
    std::string r = fmt::format("r{}", next++);
    loads += fmt::format("    {} {} = {}(in{}[{}]);\n", compute_type(s.dtype()), r, ld(s.dtype()),
                         source, index);
    reg[operand] = r;
  }
  if (need_coords) body += coords(out, "i", "c");
  body += loads;
  for (ir::ValueId m : group.nodes) {
    const ir::Node& n = g.node(m);
    DType dt = n.shape.dtype();
    std::string type = compute_type(dt);
    DType in_dt = g.node(n.inputs[0]).shape.dtype();
    std::string in_type = compute_type(in_dt);
    std::string a = reg[n.inputs[0]];
    std::string expr;
    if (n.op == Op::convert) {
      expr = fmt::format("{}({}({}))", ld(dt), st(dt), a);
    } else if (n.op == Op::is_nan) {
      expr = in_type == "i64" ? "(i64)0" : fmt::format("(i64)({0} != {0})", a);
    } else if (n.op == Op::select) {
      expr = fmt::format("({} ? {} : {})", a, reg[n.inputs[1]], reg[n.inputs[2]]);
    } else if (is_compare(n.op)) {
      expr = fmt::format("(i64)({} {} {})", a, compare_symbol(n.op), reg[n.inputs[1]]);
    } else if (n.inputs.size() == 1) {
      expr = unary(n.op, type, a, dt);
    } else {
      expr = binary(n.op, type, a, reg[n.inputs[1]], dt);
    }
    // Halves are computed in float and rounded after every op.
    if ((dt == DType::f16 || dt == DType::bf16) && n.op != Op::convert) {
      expr = fmt::format("{}({}({}))", ld(dt), st(dt), expr);
    }
    std::string r = fmt::format("r{}", next++);
    body += fmt::format("    {} {} = {};\n", type, r, expr);
    reg[m] = r;
  }
  body += fmt::format("    out[i] = {}({});\n", st(out.dtype()), reg[id]);

  KernelCode k;
  k.name = kname;
  k.work = out.numel();
  k.source = signature(kname, out.dtype(), source_dtypes) + grid_stride(out.numel(), body) + "}\n";
  return {k};
}

}  // namespace prism::cuda::detail
