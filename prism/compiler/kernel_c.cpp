#include "prism/compiler/kernel_c.h"

#include <fmt/format.h>

#include <cmath>

#include "prism/core/error.h"

namespace prism::kernel {

using ir::Op;

std::string literal(double v, Scalar s, const CDialect& d) {
  if (s == Scalar::i64) return d.integer(static_cast<int64_t>(v));
  if (std::isnan(v)) return d.nan(s);
  if (std::isinf(v)) return v > 0 ? d.infinity(s) : "(-" + d.infinity(s) + ")";
  // The shortest text that reads back as the same value, with a decimal point or an exponent.
  std::string t =
      s == Scalar::f32 ? fmt::format("{}", static_cast<float>(v)) : fmt::format("{}", v);
  if (t.find_first_of(".e") == std::string::npos) t += ".0";
  return s == Scalar::f32 ? t + "f" : t;
}

namespace {

const char* math_name(Op op) {
  switch (op) {
    case Op::exp:
      return "exp";
    case Op::log:
      return "log";
    case Op::log1p:
      return "log1p";
    case Op::sqrt:
      return "sqrt";
    case Op::tanh:
      return "tanh";
    case Op::sin:
      return "sin";
    case Op::cos:
      return "cos";
    case Op::erf:
      return "erf";
    case Op::floor:
      return "floor";
    case Op::ceil:
      return "ceil";
    case Op::round:  // half to even
      return "rint";
    case Op::abs:
      return "fabs";
    case Op::rem:  // the sign of the dividend
      return "fmod";
    case Op::pow:
      return "pow";
    case Op::atan2:
      return "atan2";
    default:
      return nullptr;
  }
}

const char* infix(Op op) {
  switch (op) {
    case Op::add:
      return "+";
    case Op::sub:
      return "-";
    case Op::mul:
      return "*";
    case Op::div:
      return "/";
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
    case Op::ge:
      return ">=";
    default:
      return nullptr;
  }
}

bool is_compare(Op op) {
  return op == Op::eq || op == Op::ne || op == Op::lt || op == Op::le || op == Op::gt ||
         op == Op::ge;
}

// The C expression of an elementwise op on operands `x` of class `in`. prism's own rules
// (x / 0, negative integer powers, NaN in max/min, saturating converts) were written out as
// primitives by the legalize pass, so each op is its plain C counterpart here.
std::string op_text(Op op, Scalar in, const std::vector<std::string>& x, const CDialect& d) {
  const std::string i64 = d.type(Scalar::i64);
  const bool f = is_float(in);
  const std::string one = literal(1, in, d);
  switch (op) {
    case Op::neg:
      return fmt::format("(-{})", x[0]);
    case Op::abs:
      if (!f) return fmt::format("({0} < 0 ? -{0} : {0})", x[0]);
      break;
    case Op::rsqrt:
      if (f) return fmt::format("({} / {}({}))", one, d.math("sqrt", in), x[0]);
      break;
    case Op::logistic:
      if (f) return fmt::format("({0} / ({0} + {1}(-{2})))", one, d.math("exp", in), x[0]);
      break;
    case Op::sign:
      if (!f) return fmt::format("(({0} > 0) - ({0} < 0))", x[0], i64);
      return fmt::format("({0} ? {1} : ({2})(({1} > 0) - ({1} < 0)))", d.is_nan(x[0]), x[0],
                         d.type(in));
    case Op::is_nan:
      return f ? fmt::format("({})({})", i64, d.is_nan(x[0])) : d.integer(0);
    case Op::logical_not:
      return fmt::format("({})(!{})", i64, x[0]);
    case Op::logical_and:
      return fmt::format("({})({} && {})", i64, x[0], x[1]);
    case Op::logical_or:
      return fmt::format("({})({} || {})", i64, x[0], x[1]);
    case Op::logical_xor:
      return fmt::format("({})(({} != 0) != ({} != 0))", i64, x[0], x[1]);
    case Op::max:
      return fmt::format("({0} > {1} ? {0} : {1})", x[0], x[1]);
    case Op::min:
      return fmt::format("({0} < {1} ? {0} : {1})", x[0], x[1]);
    case Op::select:
      return fmt::format("({} ? {} : {})", x[0], x[1], x[2]);
    case Op::pow:
      if (!f) return fmt::format("{}({}, {})", d.ipow(), x[0], x[1]);
      break;
    case Op::rem:
      if (!f) return fmt::format("({} % {})", x[0], x[1]);
      break;
    default:
      break;
  }
  if (is_compare(op)) return fmt::format("({})({} {} {})", i64, x[0], infix(op), x[1]);
  if (const char* sym = infix(op)) return fmt::format("({} {} {})", x[0], sym, x[1]);
  if (const char* fn = math_name(op); fn && f) {
    std::string call = d.math(fn, in) + "(" + x[0];
    for (size_t k = 1; k < x.size(); ++k) call += ", " + x[k];
    return call + ")";
  }
  fail("kernel: elementwise {} is not defined for {}", ir::op_name(op),
       f ? "floating point" : "integers");
}

class Renderer {
 public:
  Renderer(const Kernel& k, const std::vector<DType>& ins, const CDialect& d)
      : k_(k), ins_(ins), d_(d), used_(k.used()), in_loop_(k.in_loop()), text_(k.exprs.size()) {}

  std::string operator()() {
    std::string body;
    if (uses(ExprKind::coord)) body += coordinates();
    body += exprs(false);
    std::string result = k_.value == kNone ? "" : text_[k_.value];
    Scalar cls = k_.value == kNone ? Scalar::i64 : k_.exprs[k_.value].type;
    if (k_.reduction) result = reduction(&body, &cls);
    std::string at = k_.at == kNone ? "i" : text_[k_.at];
    body += fmt::format("    out[{}] = {};\n", at, d_.store(k_.out, cls, result));
    return d_.signature(k_.name, k_.out, ins_) + d_.items(k_.items(), body) + "}\n";
  }

 private:
  bool uses(ExprKind kind) const {
    for (size_t e = 0; e < k_.exprs.size(); ++e) {
      if (used_[e] && k_.exprs[e].kind == kind) return true;
    }
    return false;
  }

  // c0, c1, ...: the work item's coordinates in the space.
  std::string coordinates() const {
    const bool narrow = k_.items() <= 0xffffffffLL;
    const std::string t = narrow ? d_.u32() : d_.type(Scalar::i64);
    auto size = [&](int64_t s) { return narrow ? fmt::format("{}u", s) : d_.integer(s); };
    const int rank = static_cast<int>(k_.space.size());
    std::string s = fmt::format("    {} rest = ({})i;\n", t, t);
    for (int a = rank - 1; a > 0; --a) {
      s += fmt::format("    const {0} c{1} = rest % {2}; rest /= {2};\n", t, a, size(k_.space[a]));
    }
    if (rank > 0) s += fmt::format("    const {} c0 = rest;\n", t);
    return s + "    (void)rest;\n";
  }

  // Declarations of the used expressions inside (or outside) the loop nest, in order.
  std::string exprs(bool inside) {
    std::string s;
    for (size_t id = 0; id < k_.exprs.size(); ++id) {
      if (!used_[id] || in_loop_[id] != inside) continue;
      const Expr& e = k_.exprs[id];
      std::vector<std::string> x;
      for (ExprId a : e.args) x.push_back(text_[a]);
      std::string rhs;
      switch (e.kind) {
        case ExprKind::constant:
          text_[id] = e.type == Scalar::i64 ? d_.integer(e.integer) : literal(e.number, e.type, d_);
          continue;
        case ExprKind::flat:
          text_[id] = std::string(1, 'i');
          continue;
        case ExprKind::coord:
          text_[id] = fmt::format("c{}", e.axis);
          continue;
        case ExprKind::loop:
          text_[id] = fmt::format("r{}", e.axis);
          continue;
        case ExprKind::load: {
          std::string v = d_.load(ins_.at(e.operand), fmt::format("in{}", e.operand), x[0]);
          rhs = x.size() > 1 ? fmt::format("({} ? {} : {})", x[1], v, literal(0, e.type, d_)) : v;
          break;
        }
        case ExprKind::op: {
          Scalar in = k_.exprs[e.args[e.op == Op::select ? 1 : 0]].type;
          rhs = op_text(e.op, in, x, d_);
          break;
        }
        case ExprKind::round:
          rhs = d_.round(e.dtype, k_.exprs[e.args[0]].type, x[0]);
          break;
      }
      text_[id] = fmt::format("e{}", id);
      s += fmt::format("    const {} e{} = {};\n", d_.type(e.type), id, rhs);
    }
    return s;
  }

  // Appends the loop nest to `body`; returns the result and sets its class.
  std::string reduction(std::string* body, Scalar* cls) {
    const Reduction& r = *k_.reduction;
    const Scalar a = r.accumulator;
    const std::string A = d_.type(a), i64 = d_.type(Scalar::i64);
    std::string open, close, init, combine, result = "acc";
    for (size_t l = 0; l < r.loops.size(); ++l) {
      open += fmt::format("    for ({0} r{1} = 0; r{1} < {2}; ++r{1}) {{\n", i64, l,
                          d_.integer(r.loops[l]));
      close += "    }\n";
    }
    const std::string inner = exprs(true);
    const std::string v = fmt::format("(({}){})", A, text_.at(k_.value));
    const bool f = is_float(a);
    switch (r.combine) {
      case Combine::sum:
        init = fmt::format("    {} acc = {};\n", A, literal(0, a, d_));
        if (a == Scalar::f32) {  // compensated: within a few ulps of a double accumulator
          init += fmt::format("    {} comp = {};\n", A, literal(0, a, d_));
          combine = fmt::format(
              "    {{ const {0} y = {1} - comp, t = acc + y; comp = {2} ? (t - acc) - y : {3}; "
              "acc = t; }}\n",
              A, v, d_.is_finite("t"), literal(0, a, d_));
        } else {
          combine = fmt::format("    acc += {};\n", v);
        }
        break;
      case Combine::prod:
        init = fmt::format("    {} acc = {};\n", A, literal(1, a, d_));
        combine = fmt::format("    acc *= {};\n", v);
        break;
      case Combine::max:
      case Combine::min: {
        const bool max = r.combine == Combine::max;
        const std::string cmp = max ? "<" : ">";
        if (f) {
          init = fmt::format("    {} acc = {};\n", A, literal(max ? -INFINITY : INFINITY, a, d_));
          combine = fmt::format(
              "    {{ const {0} v = {1}; acc = ({2} || {3}) ? {4} : (acc {5} v ? v : acc); }}\n", A,
              v, d_.is_nan("v"), d_.is_nan("acc"), d_.nan(a), cmp);
        } else {
          init = fmt::format("    {} acc = {};\n", A, d_.integer(max ? INT64_MIN : INT64_MAX));
          combine =
              fmt::format("    {{ const {} v = {}; acc = acc {} v ? v : acc; }}\n", A, v, cmp);
        }
        break;
      }
      case Combine::argmax:
      case Combine::argmin: {
        // The first extreme; a NaN is one, and the first NaN wins.
        const std::string better = r.combine == Combine::argmax ? "v > acc" : "v < acc";
        init =
            fmt::format("    {} acc = {};\n    {} best = -1, k = 0;\n", A, literal(0, a, d_), i64);
        std::string take =
            f ? fmt::format("(!{} && ({} || {}))", d_.is_nan("acc"), d_.is_nan("v"), better)
              : better;
        combine = fmt::format(
            "    {{ const {} v = {}; if (best < 0 || {}) {{ best = k; acc = v; }} ++k; }}\n", A, v,
            take);
        result = "(best < 0 ? 0 : best)";
        *cls = Scalar::i64;
        *body += init + open + inner + combine + close;
        return result;
      }
    }
    *cls = a;
    *body += init + open + inner + combine + close;
    return result;
  }

  const Kernel& k_;
  const std::vector<DType>& ins_;
  const CDialect& d_;
  std::vector<bool> used_, in_loop_;
  std::vector<std::string> text_;
};

}  // namespace

std::string render(const Kernel& kernel, const std::vector<DType>& ins, const CDialect& d) {
  return Renderer(kernel, ins, d)();
}

}  // namespace prism::kernel
