// The causal short convolution (LFM 2) as one kernel: x {B, S, C}, state {B, K, C} (the K
// inputs before x's first), weight {K+1, C}; y[b, t, c] = sum_j weight[j, c] * w[b, t + j, c]
// with w = concat(state, x) along S. Rows (b, t) run in parallel; each row accumulates the taps
// over contiguous channels, in f32 for halves.
#include <type_traits>
#include <vector>

#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/storage.h"
#include "prism/core/error.h"

namespace prism::cpu {

Kernel make_short_conv_kernel(const ir::Graph& g, ir::ValueId id) {
  const ir::Node& n = g.node(id);
  if (n.op != ir::Op::short_conv) return nullptr;
  const Shape x = n.shape;
  const int64_t B = x.size(0), S = x.size(1), C = x.size(2);
  const int64_t K = g.node(n.inputs[1]).shape.size(1);
  return [=](auto in, std::byte* out, ThreadPool& pool) {
    visit_storage(x.dtype(), [&](auto tag) {
      using St = decltype(tag);
      if constexpr (std::is_same_v<St, float> || std::is_same_v<St, double> ||
                    std::is_same_v<St, BF16> || std::is_same_v<St, F16>) {
        using T = std::conditional_t<std::is_same_v<St, double>, double, float>;
        const St* xp = reinterpret_cast<const St*>(in[0]);
        const St* sp = reinterpret_cast<const St*>(in[1]);
        const St* wp = reinterpret_cast<const St*>(in[2]);
        St* y = reinterpret_cast<St*>(out);
        pool.parallel_for(B * S, 4, [&](int64_t r0, int64_t r1) {
          std::vector<T> acc(C);
          for (int64_t r = r0; r < r1; ++r) {
            int64_t b = r / S, t = r % S;
            std::fill(acc.begin(), acc.end(), T(0));
            for (int64_t j = 0; j <= K; ++j) {
              int64_t i = t + j;  // in concat(state, x)
              const St* src = i < K ? sp + (b * K + i) * C : xp + (b * S + i - K) * C;
              const St* w = wp + j * C;
              for (int64_t c = 0; c < C; ++c) {
                acc[c] += to_compute<T>(w[c]) * to_compute<T>(src[c]);
              }
            }
            St* yr = y + r * C;
            for (int64_t c = 0; c < C; ++c) yr[c] = to_storage<St>(acc[c]);
          }
        });
      } else {
        fail("cpu: short_conv needs a floating-point dtype, got {}", name(x.dtype()));
      }
    });
  };
}

}  // namespace prism::cpu
