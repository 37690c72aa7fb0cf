#include "prism/backends/cpu/elementwise.h"

#include "prism/backends/cpu/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "prism/backends/cpu/elementwise.cpp"
#include <hwy/foreach_target.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "prism/backends/cpu/bf16-inl.h"
#include "prism/backends/cpu/fast_math-inl.h"
#include "prism/backends/cpu/fast_math.h"
#include "prism/backends/cpu/simd.h"

// The block loop, once per SIMD target: plain loops, which the compiler vectorizes with
// each target's instructions, and Highway's vectors for exp and the logistic function.
HWY_BEFORE_NAMESPACE();
namespace prism::cpu::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using ir::Op;

// bf16 blocks in whole vectors (bf16-inl.h: the same bits as dtype.h's conversions; its
// WidenBf16Array widens them), the compiler's loops at half the vector width took most of a
// bf16 program's time: y = x rounded to bf16 (as f32), y = x rounded and stored.
void RoundBf16Block(const float* x, float* y, int n) {
  const hn::ScalableTag<float> d;
  const int L = static_cast<int>(hn::Lanes(d));
  int i = 0;
  for (; i + L <= n; i += L) hn::StoreU(RoundToBf16(d, hn::LoadU(d, x + i)), d, y + i);
  for (; i < n; ++i) y[i] = bf16_to_f32(f32_to_bf16(x[i]));
}
void StoreBf16Block(const float* x, uint16_t* y, int n) {
  const hn::ScalableTag<float> d;
  const int L = static_cast<int>(hn::Lanes(d));
  int i = 0;
  for (; i + L <= n; i += L) StoreBf16(d, hn::LoadU(d, x + i), y + i);
  for (; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

// Reads n output-ordered elements starting at flat output index `begin`.
template <typename T, typename S>
void load_block(const S* src, bool contiguous, const std::array<int64_t, kMaxRank>& stride,
                const Shape& out, int64_t begin, int n, T* dst) {
  if constexpr (std::is_same_v<S, BF16> && std::is_same_v<T, float>) {
    if (contiguous) {
      WidenBf16Array(reinterpret_cast<const uint16_t*>(src + begin), dst, n);
      return;
    }
  }
  if (contiguous) {
    for (int i = 0; i < n; ++i) dst[i] = to_compute<T>(src[begin + i]);
    return;
  }
  int rank = out.rank();
  if (rank == 0) {
    for (int i = 0; i < n; ++i) dst[i] = to_compute<T>(src[0]);
    return;
  }
  std::array<int64_t, kMaxRank> index{};
  int64_t rest = begin, offset = 0;
  for (int a = rank - 1; a >= 0; --a) {
    index[a] = rest % out.size(a);
    rest /= out.size(a);
    offset += index[a] * stride[a];
  }
  int last = rank - 1;
  int64_t inner = out.size(last), step = stride[last];
  int done = 0;
  while (done < n) {
    int run = static_cast<int>(std::min<int64_t>(n - done, inner - index[last]));
    if (step == 0) {
      T v = to_compute<T>(src[offset]);
      for (int i = 0; i < run; ++i) dst[done + i] = v;
    } else {
      for (int i = 0; i < run; ++i) dst[done + i] = to_compute<T>(src[offset + i * step]);
    }
    done += run;
    offset += run * step;
    index[last] += run;
    for (int a = last; a > 0 && index[a] == out.size(a); --a) {  // carry
      offset -= index[a] * stride[a];
      index[a] = 0;
      ++index[a - 1];
      offset += stride[a - 1];
    }
  }
}

template <typename T>
void unary(Op op, const T* x, T* y, int n) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case Op::neg:
        for (int i = 0; i < n; ++i) y[i] = -x[i];
        return;
      case Op::abs:
        for (int i = 0; i < n; ++i) y[i] = std::abs(x[i]);
        return;
      case Op::exp:
        if constexpr (std::is_same_v<T, float>) {
          ExpF32Array(x, y, n);
        } else {
          for (int i = 0; i < n; ++i) y[i] = std::exp(x[i]);
        }
        return;
      case Op::log:
        for (int i = 0; i < n; ++i) y[i] = std::log(x[i]);
        return;
      case Op::log1p:
        for (int i = 0; i < n; ++i) y[i] = std::log1p(x[i]);
        return;
      case Op::sqrt:
        for (int i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
        return;
      case Op::rsqrt:
        for (int i = 0; i < n; ++i) y[i] = T(1) / std::sqrt(x[i]);
        return;
      case Op::tanh:
        for (int i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
        return;
      case Op::logistic:
        if constexpr (std::is_same_v<T, float>) {
          LogisticF32Array(x, y, n);
        } else {
          for (int i = 0; i < n; ++i) y[i] = T(1) / (T(1) + std::exp(-x[i]));
        }
        return;
      case Op::sin:
        for (int i = 0; i < n; ++i) y[i] = std::sin(x[i]);
        return;
      case Op::cos:
        for (int i = 0; i < n; ++i) y[i] = std::cos(x[i]);
        return;
      case Op::erf:
        for (int i = 0; i < n; ++i) y[i] = std::erf(x[i]);
        return;
      case Op::floor:
        for (int i = 0; i < n; ++i) y[i] = std::floor(x[i]);
        return;
      case Op::ceil:
        for (int i = 0; i < n; ++i) y[i] = std::ceil(x[i]);
        return;
      case Op::round:
        for (int i = 0; i < n; ++i) y[i] = std::nearbyint(x[i]);
        return;
      case Op::sign:
        for (int i = 0; i < n; ++i) y[i] = std::isnan(x[i]) ? x[i] : T((x[i] > 0) - (x[i] < 0));
        return;
      default:
        break;
    }
  } else {
    switch (op) {
      case Op::neg:
        for (int i = 0; i < n; ++i) y[i] = -x[i];
        return;
      case Op::abs:
        for (int i = 0; i < n; ++i) y[i] = x[i] < 0 ? -x[i] : x[i];
        return;
      case Op::sign:
        for (int i = 0; i < n; ++i) y[i] = (x[i] > 0) - (x[i] < 0);
        return;
      case Op::logical_not:
        for (int i = 0; i < n; ++i) y[i] = !x[i];
        return;
      default:
        break;
    }
  }
  fail("cpu: elementwise {} is not defined for this dtype", ir::op_name(op));
}

template <typename T>
void binary(Op op, const T* a, const T* b, T* y, int n) {
  switch (op) {
    case Op::add:
      for (int i = 0; i < n; ++i) y[i] = a[i] + b[i];
      return;
    case Op::sub:
      for (int i = 0; i < n; ++i) y[i] = a[i] - b[i];
      return;
    case Op::mul:
      for (int i = 0; i < n; ++i) y[i] = a[i] * b[i];
      return;
    case Op::max:
      if constexpr (std::is_floating_point_v<T>) {  // NaN propagates
        for (int i = 0; i < n; ++i) y[i] = (a[i] > b[i] || std::isnan(a[i])) ? a[i] : b[i];
      } else {
        for (int i = 0; i < n; ++i) y[i] = std::max(a[i], b[i]);
      }
      return;
    case Op::min:
      if constexpr (std::is_floating_point_v<T>) {
        for (int i = 0; i < n; ++i) y[i] = (a[i] < b[i] || std::isnan(a[i])) ? a[i] : b[i];
      } else {
        for (int i = 0; i < n; ++i) y[i] = std::min(a[i], b[i]);
      }
      return;
    default:
      break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case Op::div:
        for (int i = 0; i < n; ++i) y[i] = a[i] / b[i];
        return;
      case Op::pow:
        for (int i = 0; i < n; ++i) y[i] = std::pow(a[i], b[i]);
        return;
      case Op::rem:
        for (int i = 0; i < n; ++i) y[i] = std::fmod(a[i], b[i]);
        return;
      case Op::atan2:
        for (int i = 0; i < n; ++i) y[i] = std::atan2(a[i], b[i]);
        return;
      default:
        break;
    }
  } else {
    switch (op) {
      case Op::div:  // truncates toward zero; x/0 is 0 rather than a trap
        for (int i = 0; i < n; ++i) y[i] = b[i] == 0 ? 0 : a[i] / b[i];
        return;
      case Op::rem:
        for (int i = 0; i < n; ++i) y[i] = b[i] == 0 ? 0 : a[i] % b[i];
        return;
      case Op::pow:
        for (int i = 0; i < n; ++i) {
          T r = 1, base = a[i];
          for (T e = b[i]; e > 0; e >>= 1, base *= base)
            if (e & 1) r *= base;
          y[i] = b[i] < 0 ? (a[i] == 1 ? 1 : (a[i] == -1 ? ((b[i] & 1) ? -1 : 1) : 0)) : r;
        }
        return;
      case Op::logical_and:
        for (int i = 0; i < n; ++i) y[i] = a[i] && b[i];
        return;
      case Op::logical_or:
        for (int i = 0; i < n; ++i) y[i] = a[i] || b[i];
        return;
      case Op::logical_xor:
        for (int i = 0; i < n; ++i) y[i] = (a[i] != 0) != (b[i] != 0);
        return;
      default:
        break;
    }
  }
  fail("cpu: elementwise {} is not defined for this dtype", ir::op_name(op));
}

template <typename T>
void compare(Op op, const T* a, const T* b, int64_t* y, int n) {
  switch (op) {
    case Op::eq:
      for (int i = 0; i < n; ++i) y[i] = a[i] == b[i];
      return;
    case Op::ne:
      for (int i = 0; i < n; ++i) y[i] = a[i] != b[i];
      return;
    case Op::lt:
      for (int i = 0; i < n; ++i) y[i] = a[i] < b[i];
      return;
    case Op::le:
      for (int i = 0; i < n; ++i) y[i] = a[i] <= b[i];
      return;
    case Op::gt:
      for (int i = 0; i < n; ++i) y[i] = a[i] > b[i];
      return;
    case Op::ge:
      for (int i = 0; i < n; ++i) y[i] = a[i] >= b[i];
      return;
    default:
      fail("cpu: {} is not a comparison", ir::op_name(op));
  }
}

bool is_compare(Op op) {
  return op == Op::eq || op == Op::ne || op == Op::lt || op == Op::le || op == Op::gt ||
         op == Op::ge;
}

// Converts a register between classes, rounding through the target dtype.
template <typename From>
void convert(const From* x, DType to, std::byte* out, int n) {
  if constexpr (std::is_same_v<From, float>) {
    if (to == DType::bf16) {
      RoundBf16Block(x, reinterpret_cast<float*>(out), n);
      return;
    }
  }
  visit_storage(to, [&](auto s) {
    using S = decltype(s);
    visit_class(class_of(to), [&](auto t) {
      using T = decltype(t);
      T* y = reinterpret_cast<T*>(out);
      for (int i = 0; i < n; ++i) y[i] = to_compute<T>(to_storage<S>(x[i]));
    });
  });
}

}  // namespace

// Runs `p` over the output elements [begin, begin + n): `registers` holds one 64-byte aligned
// block of FusedProgram::kRegisterBytes per instruction, value[r] receives where instruction r's
// block is.
void RunFusedBlock(const FusedProgram& p, std::span<const std::byte* const> sources, std::byte* out,
                   int64_t begin, int n, std::byte* registers, std::byte** value) {
  using Load = FusedProgram::Load;
  using Instr = FusedProgram::Instr;
  // value[r]: where instruction r's block is. Loads that need no conversion read the source
  // in place, and the last instruction writes straight into the output when it can, so a
  // plain `x + y` touches memory as a hand-written loop would.
  size_t last_index = p.instrs.size() - 1;
  for (size_t r = 0; r < p.instrs.size(); ++r) {
    const Instr& in = p.instrs[r];
    std::byte* dst = registers + r * FusedProgram::kRegisterBytes;
    if (r == last_index && p.direct_store) {
      dst = out + begin * size_of(p.out_shape.dtype());
    }
    value[r] = dst;
    if (in.load >= 0) {
      const Load& l = p.loads[in.load];
      if (l.direct) {
        value[r] = const_cast<std::byte*>(sources[l.source]) + begin * size_of(l.dtype);
        continue;
      }
      visit_storage(l.dtype, [&](auto s) {
        using S = decltype(s);
        visit_class(in.cls, [&](auto t) {
          using T = decltype(t);
          load_block(reinterpret_cast<const S*>(sources[l.source]), l.contiguous, l.stride,
                     p.out_shape, begin, n, reinterpret_cast<T*>(dst));
        });
      });
      continue;
    }
    if (in.op == Op::convert || in.op == Op::is_nan) {
      visit_class(in.in_cls, [&](auto t) {
        using T = decltype(t);
        const T* x = reinterpret_cast<const T*>(value[in.a]);
        if (in.op == Op::convert) {
          convert(x, in.dtype, dst, n);
        } else {
          auto* y = reinterpret_cast<int64_t*>(dst);
          for (int i = 0; i < n; ++i) y[i] = x[i] != x[i];
        }
      });
      continue;
    }
    if (in.op == Op::select) {
      const int64_t* c = reinterpret_cast<const int64_t*>(value[in.a]);
      visit_class(in.cls, [&](auto t) {
        using T = decltype(t);
        const T *a = reinterpret_cast<const T*>(value[in.b]),
                *b = reinterpret_cast<const T*>(value[in.c]);
        T* y = reinterpret_cast<T*>(dst);
        for (int i = 0; i < n; ++i) y[i] = c[i] ? a[i] : b[i];
      });
      continue;
    }
    if (is_compare(in.op)) {
      visit_class(in.in_cls, [&](auto t) {
        using T = decltype(t);
        compare(in.op, reinterpret_cast<const T*>(value[in.a]),
                reinterpret_cast<const T*>(value[in.b]), reinterpret_cast<int64_t*>(dst), n);
      });
      continue;
    }
    visit_class(in.cls, [&](auto t) {
      using T = decltype(t);
      if (in.b < 0) {
        unary(in.op, reinterpret_cast<const T*>(value[in.a]), reinterpret_cast<T*>(dst), n);
      } else {
        binary(in.op, reinterpret_cast<const T*>(value[in.a]),
               reinterpret_cast<const T*>(value[in.b]), reinterpret_cast<T*>(dst), n);
      }
    });
    // Halves are computed in float; round each result so that the fused loop gives what one
    // kernel per op would.
    if (in.dtype == DType::f16 || in.dtype == DType::bf16) {
      convert(reinterpret_cast<float*>(dst), in.dtype, dst, n);
    }
  }
  if (p.direct_store) return;
  const Instr& last = p.instrs.back();
  const std::byte* result = value[last_index];
  visit_storage(p.out_shape.dtype(), [&](auto s) {
    using S = decltype(s);
    visit_class(last.cls, [&](auto t) {
      using T = decltype(t);
      const T* x = reinterpret_cast<const T*>(result);
      S* y = reinterpret_cast<S*>(out) + begin;
      if constexpr (std::is_same_v<S, BF16> && std::is_same_v<T, float>) {
        StoreBf16Block(x, reinterpret_cast<uint16_t*>(y), n);
      } else {
        for (int i = 0; i < n; ++i) y[i] = to_storage<S>(x[i]);
      }
    });
  });
}

}  // namespace prism::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace prism::cpu {

using ir::Op;

HWY_EXPORT(RunFusedBlock);

FusedKernel::FusedKernel(const ir::Graph& g, const compiler::FusionPlan& plan,
                         const compiler::FusionGroup& group) {
  program_.out_shape = g.node(group.root).shape;
  std::vector<int> reg_of(g.size(), -1);
  auto load = [&](ir::ValueId v) {
    if (reg_of[v] >= 0) return reg_of[v];
    // Read through virtual broadcasts: a stride of 0 on the broadcast axes.
    const compiler::OperandRead read = compiler::read_through(g, plan, v, program_.out_shape);
    const ir::ValueId src = read.source;
    const Shape& s = g.node(src).shape;
    const bool contiguous = read.contiguous;
    const std::array<int64_t, kMaxRank>& stride = read.strides;
    int source =
        static_cast<int>(std::find(sources_.begin(), sources_.end(), src) - sources_.begin());
    if (source == static_cast<int>(sources_.size())) sources_.push_back(src);
    program_.loads.push_back(
        {source, s.dtype(), contiguous, stride, contiguous && same_type(s.dtype())});
    Instr in{Op::input, class_of(s.dtype()), class_of(s.dtype()), s.dtype()};
    in.load = static_cast<int>(program_.loads.size()) - 1;
    program_.instrs.push_back(in);
    return reg_of[v] = static_cast<int>(program_.instrs.size()) - 1;
  };
  for (ir::ValueId operand : group.operands) load(operand);
  for (ir::ValueId m : group.nodes) {
    const ir::Node& n = g.node(m);
    Instr in{n.op, class_of(n.shape.dtype()), class_of(g.node(n.inputs[0]).shape.dtype()),
             n.shape.dtype()};
    if (n.op == Op::select) in.in_cls = class_of(g.node(n.inputs[1]).shape.dtype());
    int* slots[3] = {&in.a, &in.b, &in.c};
    for (size_t k = 0; k < n.inputs.size(); ++k) *slots[k] = reg_of[n.inputs[k]];
    program_.instrs.push_back(in);
    reg_of[m] = static_cast<int>(program_.instrs.size()) - 1;
  }
  const Instr& last = program_.instrs.back();
  program_.direct_store = last.load < 0 && same_type(program_.out_shape.dtype()) &&
                          last.cls == class_of(program_.out_shape.dtype());
}

std::string FusedKernel::describe() const {
  std::string text;
  for (size_t r = 0; r < program_.instrs.size(); ++r) {
    const Instr& in = program_.instrs[r];
    if (!text.empty()) text += "; ";
    if (in.load >= 0) {
      const Load& l = program_.loads[in.load];
      text += fmt::format("r{} = load %{} ({}{})", r, sources_[l.source], name(l.dtype),
                          l.direct       ? ", in place"
                          : l.contiguous ? ""
                                         : ", strided");
      continue;
    }
    text += fmt::format("r{} = {}(", r, ir::op_name(in.op));
    for (int operand : {in.a, in.b, in.c}) {
      if (operand >= 0) text += fmt::format("{}r{}", text.back() == '(' ? "" : ", ", operand);
    }
    text += ")";
  }
  return text +
         (program_.direct_store ? " -> written straight to memory" : " -> stored with conversion");
}

bool FusedKernel::same_type(DType t) {
  // The compute type is the storage type: f64 (double), f32 (float), i64 (int64_t).
  return t == DType::f64 || t == DType::f32 || t == DType::i64;
}

void FusedKernel::run(std::span<const std::byte* const> sources, std::byte* out,
                      ThreadPool& pool) const {
  int64_t total = program_.out_shape.numel();
  int64_t blocks = (total + kBlock - 1) / kBlock;
  simd::current();  // points Highway's tables at the target in use
  auto* run_block = &HWY_DYNAMIC_DISPATCH(RunFusedBlock);
  pool.parallel_for(blocks, 16, [&](int64_t b0, int64_t b1) {
    auto registers =
        std::make_unique<std::byte[]>(program_.instrs.size() * FusedProgram::kRegisterBytes + 64);
    std::byte* aligned = reinterpret_cast<std::byte*>(
        (reinterpret_cast<uintptr_t>(registers.get()) + 63) & ~uintptr_t(63));
    std::vector<std::byte*> value(program_.instrs.size());
    for (int64_t b = b0; b < b1; ++b) {
      int64_t begin = b * kBlock;
      int n = static_cast<int>(std::min<int64_t>(kBlock, total - begin));
      run_block(program_, sources, out, begin, n, aligned, value.data());
    }
  });
}

}  // namespace prism::cpu
#endif  // HWY_ONCE
