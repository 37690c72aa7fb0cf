// reduce_rows.h's loops, compiled once per SIMD target (hwy_targets.h): several vector
// accumulators per row, in double for sums and products (as the scalar loops summed), in the
// values' own type for max and min (exact either way), with NaN tracked in a mask.
#include "prism/backends/cpu/reduce_rows.h"

#include "prism/backends/cpu/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "prism/backends/cpu/reduce_rows.cpp"
#include <hwy/foreach_target.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "prism/backends/cpu/rows-inl.h"
#include "prism/backends/cpu/simd.h"
#include "prism/backends/cpu/storage.h"

HWY_BEFORE_NAMESPACE();
namespace prism::cpu::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The product of x[0, n) in double.
template <typename T>
double ProductAsF64(const T* x, int64_t n) {
  const hn::ScalableTag<double> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0);
  auto a0 = one, a1 = one, a2 = one, a3 = one;
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    a0 = hn::Mul(a0, LoadAsF64(d, x + i));
    a1 = hn::Mul(a1, LoadAsF64(d, x + i + lanes));
    a2 = hn::Mul(a2, LoadAsF64(d, x + i + 2 * lanes));
    a3 = hn::Mul(a3, LoadAsF64(d, x + i + 3 * lanes));
  }
  for (; i + lanes <= n; i += lanes) a0 = hn::Mul(a0, LoadAsF64(d, x + i));
  alignas(64) double lane[HWY_MAX_BYTES / sizeof(double)];
  hn::Store(hn::Mul(hn::Mul(a0, a1), hn::Mul(a2, a3)), d, lane);
  double product = 1;
  for (int64_t l = 0; l < lanes; ++l) product *= lane[l];
  for (; i < n; ++i) product *= x[i];
  return product;
}

// The largest (kMax) or smallest of x[0, n) in T; NaN if any value is NaN.
template <bool kMax, typename T>
double ExtremeOfRow(const T* x, int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto pick = [](auto a, auto b) { return kMax ? hn::Max(a, b) : hn::Min(a, b); };
  auto a0 = hn::Set(d, static_cast<T>(kMax ? -kInf : kInf)), a1 = a0;
  auto nan = hn::FirstN(d, 0);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const auto v0 = hn::LoadU(d, x + i), v1 = hn::LoadU(d, x + i + lanes);
    nan = hn::Or(nan, hn::Or(hn::IsNaN(v0), hn::IsNaN(v1)));
    a0 = pick(a0, v0);
    a1 = pick(a1, v1);
  }
  for (; i + lanes <= n; i += lanes) {
    const auto v0 = hn::LoadU(d, x + i);
    nan = hn::Or(nan, hn::IsNaN(v0));
    a0 = pick(a0, v0);
  }
  if (!hn::AllFalse(d, nan)) return kNaN;
  const auto a = pick(a0, a1);
  T e = hn::GetLane(kMax ? hn::MaxOfLanes(d, a) : hn::MinOfLanes(d, a));
  for (; i < n; ++i) {
    if (std::isnan(x[i])) return kNaN;
    e = kMax ? std::max(e, x[i]) : std::min(e, x[i]);
  }
  return e;
}

template <typename T>
double ReduceCore(Reduction op, const T* x, int64_t n) {
  switch (op) {
    case Reduction::sum:
      return SumAsF64(x, n);
    case Reduction::prod:
      return ProductAsF64(x, n);
    case Reduction::max:
      return ExtremeOfRow<true>(x, n);
    case Reduction::min:
      return ExtremeOfRow<false>(x, n);
  }
  return kNaN;
}

template <typename T>
void AccumulateCore(Reduction op, const T* x, int64_t n, double* acc) {
  const hn::ScalableTag<double> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  // max/min: NaN in either operand gives NaN (a + v is one), else the extreme.
  auto extreme = [&](auto a, auto v, auto pick) {
    return hn::IfThenElse(hn::Or(hn::IsNaN(a), hn::IsNaN(v)), hn::Add(a, v), pick(a, v));
  };
  auto step = [&](auto a, auto v) {
    switch (op) {
      case Reduction::sum:
        return hn::Add(a, v);
      case Reduction::prod:
        return hn::Mul(a, v);
      case Reduction::max:
        return extreme(a, v, [](auto p, auto q) { return hn::Max(p, q); });
      case Reduction::min:
        break;
    }
    return extreme(a, v, [](auto p, auto q) { return hn::Min(p, q); });
  };
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(step(hn::LoadU(d, acc + i), LoadAsF64(d, x + i)), d, acc + i);
  }
  for (; i < n; ++i) {
    double a = acc[i], v = x[i];
    switch (op) {
      case Reduction::sum:
        acc[i] = a + v;
        break;
      case Reduction::prod:
        acc[i] = a * v;
        break;
      case Reduction::max:
      case Reduction::min:
        acc[i] = std::isnan(a) || std::isnan(v) ? kNaN
                 : op == Reduction::max         ? std::max(a, v)
                                                : std::min(a, v);
        break;
    }
  }
}

// The first index of the extreme value, or of the first NaN: the extreme first, then a
// search for it (or for a NaN), both a vector at a time.
template <typename T>
int64_t ArgCore(bool max, const T* x, int64_t n) {
  if (n == 0) return 0;
  const double e = max ? ExtremeOfRow<true>(x, n) : ExtremeOfRow<false>(x, n);
  const bool nan = std::isnan(e);
  const hn::ScalableTag<T> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto target = hn::Set(d, static_cast<T>(e));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    const intptr_t at = hn::FindFirstTrue(d, nan ? hn::IsNaN(v) : hn::Eq(v, target));
    if (at >= 0) return i + at;
  }
  for (; i < n; ++i) {
    if (nan ? std::isnan(x[i]) : x[i] == static_cast<T>(e)) return i;
  }
  return 0;
}

template <typename T>
void ArgAccumulateCore(bool max, const T* x, int64_t n, int64_t m, double* best, int64_t* index) {
  const hn::ScalableTag<double> d;
  const hn::RebindToSigned<decltype(d)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto vm = hn::Set(di, m);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto b = hn::LoadU(d, best + i), v = LoadAsF64(d, x + i);
    // A lane that holds a NaN keeps it; else a NaN or a better value wins.
    const auto better = hn::Or(hn::IsNaN(v), max ? hn::Gt(v, b) : hn::Lt(v, b));
    const auto take = hn::AndNot(hn::IsNaN(b), better);
    hn::StoreU(hn::IfThenElse(take, v, b), d, best + i);
    hn::StoreU(hn::IfThenElse(hn::RebindMask(di, take), vm, hn::LoadU(di, index + i)), di,
               index + i);
  }
  for (; i < n; ++i) {
    double b = best[i], v = x[i];
    if (!std::isnan(b) && (std::isnan(v) || (max ? v > b : v < b))) {
      best[i] = v;
      index[i] = m;
    }
  }
}

template <typename T>
void CumsumAccumulateCore(const T* x, int64_t n, bool exclusive, double* acc, T* y) {
  const hn::ScalableTag<double> d;
  const hn::Rebind<T, decltype(d)> dt;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto before = hn::LoadU(d, acc + i);
    const auto after = hn::Add(before, LoadAsF64(d, x + i));
    hn::StoreU(after, d, acc + i);
    const auto out = exclusive ? before : after;
    if constexpr (std::is_same_v<T, double>) {
      hn::StoreU(out, d, y + i);
    } else {
      hn::StoreU(hn::DemoteTo(dt, out), dt, y + i);
    }
  }
  for (; i < n; ++i) {
    double before = acc[i];
    acc[i] += x[i];
    y[i] = static_cast<T>(exclusive ? before : acc[i]);
  }
}

}  // namespace

void ArgAccumulateRow(bool max, DType t, const std::byte* x, int64_t n, int64_t m, double* best,
                      int64_t* index) {
  OnComputeValues(t, x, n, [&](const auto* v) { ArgAccumulateCore(max, v, n, m, best, index); });
}

void CumsumAccumulateRow(DType t, const std::byte* x, int64_t n, bool exclusive, double* acc,
                         std::byte* y) {
  OnComputeRow(t, x, y, n,
               [&](const auto* xr, auto* yr) { CumsumAccumulateCore(xr, n, exclusive, acc, yr); });
}

void ReduceRows(Reduction op, DType t, const std::byte* x, int64_t rows, int64_t n, double* out) {
  const int64_t row_bytes = n * size_of(t);
  for (int64_t r = 0; r < rows; ++r) {
    out[r] = OnComputeValues(t, x + r * row_bytes, n,
                             [&](const auto* v) { return ReduceCore(op, v, n); });
  }
}

void AccumulateRow(Reduction op, DType t, const std::byte* x, int64_t n, double* acc) {
  OnComputeValues(t, x, n, [&](const auto* v) { AccumulateCore(op, v, n, acc); });
}

int64_t ArgRow(bool max, DType t, const std::byte* x, int64_t n) {
  return OnComputeValues(t, x, n, [&](const auto* v) { return ArgCore(max, v, n); });
}

}  // namespace prism::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace prism::cpu {

HWY_EXPORT(ReduceRows);
HWY_EXPORT(AccumulateRow);
HWY_EXPORT(ArgRow);
HWY_EXPORT(ArgAccumulateRow);
HWY_EXPORT(CumsumAccumulateRow);

ReduceRowKernels reduce_row_kernels() {
  simd::current();  // points Highway's tables at the target in use
  return {&HWY_DYNAMIC_DISPATCH(ReduceRows), &HWY_DYNAMIC_DISPATCH(AccumulateRow),
          &HWY_DYNAMIC_DISPATCH(ArgRow), &HWY_DYNAMIC_DISPATCH(ArgAccumulateRow),
          &HWY_DYNAMIC_DISPATCH(CumsumAccumulateRow)};
}

}  // namespace prism::cpu
#endif  // HWY_ONCE
