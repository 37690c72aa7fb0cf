// Direct N-d convolution with groups, strides, padding and dilation:
// lhs {N, C, spatial...} x rhs {O, C/groups, spatial...} -> {N, O, spatial...}.
#include <algorithm>
#include <vector>

#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/storage.h"

namespace prism::cpu {

Kernel make_conv_kernel(const ir::Graph& g, ir::ValueId id) {
  const ir::Node& n = g.node(id);
  if (n.op != ir::Op::convolution) return nullptr;
  const auto a = n.attr<ir::ConvAttrs>();
  Shape x = g.node(n.inputs[0]).shape, w = g.node(n.inputs[1]).shape, y = n.shape;
  return [=](std::span<const std::byte* const> in, std::byte* out, ThreadPool& pool) {
    int sp = x.rank() - 2;
    int64_t batch = x.size(0), c_in = x.size(1), c_out = w.size(0), cg = w.size(1);
    int64_t og = c_out / a.groups;
    int64_t out_spatial = 1, k_spatial = 1, in_spatial = 1;
    for (int i = 0; i < sp; ++i) {
      out_spatial *= y.size(2 + i);
      k_spatial *= w.size(2 + i);
      in_spatial *= x.size(2 + i);
    }
    visit_storage(x.dtype(), [&](auto tag) {
      using S = decltype(tag);
      using A = std::conditional_t<std::is_same_v<S, double>, double, float>;
      const S* xp = reinterpret_cast<const S*>(in[0]);
      const S* wp = reinterpret_cast<const S*>(in[1]);
      S* yp = reinterpret_cast<S*>(out);
      pool.parallel_for(batch * c_out, 1, [&](int64_t t0, int64_t t1) {
        std::vector<int64_t> opos(sp), kpos(sp);
        for (int64_t t = t0; t < t1; ++t) {
          int64_t b = t / c_out, o = t % c_out, group = o / og;
          for (int64_t p = 0; p < out_spatial; ++p) {
            int64_t rest = p;
            for (int i = sp - 1; i >= 0; --i) {
              opos[i] = rest % y.size(2 + i);
              rest /= y.size(2 + i);
            }
            A acc = 0;
            for (int64_t k = 0; k < k_spatial; ++k) {
              int64_t kr = k, src = 0;
              bool inside = true;
              for (int i = sp - 1; i >= 0; --i) {
                kpos[i] = kr % w.size(2 + i);
                kr /= w.size(2 + i);
              }
              int64_t mul = 1;
              for (int i = sp - 1; i >= 0; --i) {
                int64_t at = opos[i] * a.strides[i] - a.pad_low[i] + kpos[i] * a.dilations[i];
                if (at < 0 || at >= x.size(2 + i)) {
                  inside = false;
                  break;
                }
                src += at * mul;
                mul *= x.size(2 + i);
              }
              if (!inside) continue;
              for (int64_t c = 0; c < cg; ++c) {
                int64_t ci = group * cg + c;
                acc += to_compute<A>(xp[(b * c_in + ci) * in_spatial + src]) *
                       to_compute<A>(wp[(o * cg + c) * k_spatial + k]);
              }
            }
            yp[t * out_spatial + p] = to_storage<S>(acc);
          }
        }
      });
    });
  };
}

}  // namespace prism::cpu
