#include "prism/compiler/kernel_c.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

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

// `a` and `b` combined, for reductions across a group of threads.
std::string combine_text(Combine c, Scalar s, const std::string& a, const std::string& b,
                         const CDialect& d) {
  switch (c) {
    case Combine::sum:
      return fmt::format("{} + {}", a, b);
    case Combine::prod:
      return fmt::format("{} * {}", a, b);
    case Combine::max:
    case Combine::min: {
      std::string pick = c == Combine::max ? fmt::format("({0} < {1} ? {1} : {0})", a, b)
                                           : fmt::format("({1} < {0} ? {1} : {0})", a, b);
      if (!is_float(s)) return pick;
      return fmt::format("({} || {}) ? {} : {}", d.is_nan(a), d.is_nan(b), d.nan(s), pick);
    }
    default:
      fail("kernel: {} does not combine across threads", static_cast<int>(c));
  }
}

// The value a reduction starts from.
std::string identity(Combine c, Scalar s, const CDialect& d) {
  switch (c) {
    case Combine::prod:
      return literal(1, s, d);
    case Combine::max:
      return is_float(s) ? literal(-INFINITY, s, d) : d.integer(INT64_MIN);
    case Combine::min:
      return is_float(s) ? literal(INFINITY, s, d) : d.integer(INT64_MAX);
    default:
      return literal(0, s, d);
  }
}

class Renderer {
 public:
  Renderer(const Kernel& k, const std::vector<DType>& ins, const CDialect& d)
      : k_(k),
        ins_(ins),
        d_(d),
        used_(k.used()),
        region_(k.region()),
        text_(k.exprs.size()),
        emitted_(k.exprs.size(), false) {}

  std::string operator()() {
    std::string body;
    if (uses(ExprKind::coord)) body += coordinates();
    body += exprs(0);
    bool stored = false;
    for (size_t j = 0; j < k_.loops.size(); ++j) body += loop(static_cast<int>(j), &stored);
    if (!stored) body += store(k_.cooperative ? "tid == 0" : "");
    std::string items;
    if (k_.cooperative) {
      std::vector<Scalar> scratch;
      for (const Loop& l : k_.loops) {
        if (l.combine != Combine::none &&
            std::find(scratch.begin(), scratch.end(), l.accumulator) == scratch.end()) {
          scratch.push_back(l.accumulator);
        }
      }
      items = d_.group_items(k_.items(), scratch, body);
    } else {
      items = d_.items(k_.items(), body);
    }
    return d_.signature(k_.name, k_.out, ins_) + items + "}\n";
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

  // The store, under `guard` (and the kernel's mask) when given.
  std::string store(const std::string& guard) const {
    std::string cond = guard;
    if (k_.mask != kNone) cond += (cond.empty() ? "" : " && ") + text_[k_.mask];
    const std::string at = k_.at == kNone ? "i" : text_[k_.at];
    std::string s = fmt::format("out[{}] = {};", at,
                                d_.store(k_.out, k_.exprs[k_.value].type, text_[k_.value]));
    return cond.empty() ? "    " + s + "\n" : fmt::format("    if ({}) {}\n", cond, s);
  }

  // Declarations of the used expressions of `region` not yet emitted, in order; with
  // `skip_result`, those reading that loop's result wait.
  std::string exprs(int region, int skip_result = -1) {
    std::vector<bool> waits =
        skip_result >= 0 ? k_.reads_result(skip_result) : std::vector<bool>(k_.exprs.size());
    std::string s;
    for (size_t id = 0; id < k_.exprs.size(); ++id) {
      if (!used_[id] || emitted_[id] || region_[id] != region || waits[id]) continue;
      emitted_[id] = true;
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
          text_[id] = fmt::format("l{}_{}", e.loop, e.axis);
          continue;
        case ExprKind::result:
          text_[id] = result_[e.loop];
          continue;
        case ExprKind::load: {
          const DType t = e.view ? e.dtype : e.operand < 0 ? k_.out : ins_.at(e.operand);
          std::string ptr = e.view          ? d_.view(t, e.operand)
                            : e.operand < 0 ? "out"
                                            : fmt::format("in{}", e.operand);
          std::string v = d_.load(t, ptr, x[0]);
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

  // Loop j: its accumulator, the nest, the combine, and what follows it.
  std::string loop(int j, bool* stored) {
    const Loop& l = k_.loops[j];
    const Scalar a = l.accumulator;
    const std::string A = d_.type(a), i64 = d_.type(Scalar::i64);
    const std::string acc = fmt::format("acc{}", j), comp = fmt::format("comp{}", j);
    const std::string best = fmt::format("best{}", j), k = fmt::format("k{}", j);
    const bool f = is_float(a), arg = l.combine == Combine::argmax || l.combine == Combine::argmin;
    PRISM_CHECK(!k_.cooperative || (l.extents.size() == 1 && !arg),
                "kernel {}: a cooperative loop runs over one extent and combines by value",
                k_.name);
    result_[j] = arg ? fmt::format("({0} < 0 ? 0 : {0})", best) : acc;

    std::string s, open, close, combine;
    if (l.combine != Combine::none) {
      s += fmt::format("    {} {} = {};\n", A, acc, identity(l.combine, a, d_));
    }
    if (l.combine == Combine::sum && a == Scalar::f32) {
      s += fmt::format("    {} {} = {};\n", A, comp, literal(0, a, d_));
    }
    if (arg) s += fmt::format("    {} {} = -1, {} = 0;\n", i64, best, k);
    for (size_t e = 0; e < l.extents.size(); ++e) {
      if (k_.cooperative) {
        open +=
            fmt::format("    for ({0} l{1}_{2} = tid; l{1}_{2} < {3}; l{1}_{2} += threads) {{\n",
                        i64, j, e, d_.integer(l.extents[e]));
      } else {
        open += fmt::format("    for ({0} l{1}_{2} = 0; l{1}_{2} < {3}; ++l{1}_{2}) {{\n", i64, j,
                            e, d_.integer(l.extents[e]));
      }
      close += "    }\n";
    }
    auto operand = [&] { return fmt::format("(({}){})", A, text_.at(l.operand)); };
    std::string body = exprs(2 * j + 1, l.writes && !l.exclusive ? j : -1);
    switch (l.combine) {
      case Combine::none:
        break;
      case Combine::sum:
        if (a == Scalar::f32) {  // compensated: within a few ulps of a double accumulator
          combine = fmt::format(
              "    {{ const {0} y = {1} - {2}, t = {3} + y; {2} = {4} ? (t - {3}) - y : {5}; "
              "{3} = t; }}\n",
              A, operand(), comp, acc, d_.is_finite("t"), literal(0, a, d_));
        } else {
          combine = fmt::format("    {} += {};\n", acc, operand());
        }
        break;
      case Combine::prod:
        combine = fmt::format("    {} *= {};\n", acc, operand());
        break;
      case Combine::max:
      case Combine::min:
        combine = fmt::format("    {{ const {0} v = {1}; {2} = {3}; }}\n", A, operand(), acc,
                              combine_text(l.combine, a, acc, "v", d_));
        break;
      case Combine::argmax:
      case Combine::argmin: {
        // The first extreme; a NaN is one, and the first NaN wins.
        const std::string better = (l.combine == Combine::argmax ? "v > " : "v < ") + acc;
        std::string take =
            f ? fmt::format("(!{} && ({} || {}))", d_.is_nan(acc), d_.is_nan("v"), better) : better;
        combine = fmt::format(
            "    {{ const {0} v = {1}; if ({2} < 0 || {3}) {{ {2} = {4}; {5} = v; }} ++{4}; }}\n",
            A, operand(), best, take, k, acc);
        break;
      }
    }
    if (l.writes) {
      *stored = true;
      if (l.exclusive) {
        body += store("");
        body += combine;
      } else {
        body += combine;
        body += exprs(2 * j + 1);  // what reads the result, after the step's combine
        body += store("");
      }
    } else {
      body += combine;
    }
    s += open + body + close;
    if (k_.cooperative && l.combine != Combine::none) {
      s += d_.group_combine(acc, a, identity(l.combine, a, d_),
                            combine_text(l.combine, a, "a", "b", d_));
    }
    return s + exprs(2 * j + 2);
  }

  const Kernel& k_;
  const std::vector<DType>& ins_;
  const CDialect& d_;
  std::vector<bool> used_;
  std::vector<int> region_;
  std::vector<std::string> text_;
  std::vector<bool> emitted_;
  std::map<int, std::string> result_;
};

}  // namespace

std::string render(const Kernel& kernel, const std::vector<DType>& ins, const CDialect& d) {
  return Renderer(kernel, ins, d)();
}

}  // namespace prism::kernel
