// N-d convolution with groups, strides, padding and dilation:
// lhs {N, C, spatial...} x rhs {O, C/groups, spatial...} -> {N, O, spatial...}.
// oneDNN runs f32 and bf16 with 1 to 3 spatial dims; a direct loop covers the rest.

#include <algorithm>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/onednn.h"
#include "prism/backends/cpu/storage.h"

namespace prism::cpu {

namespace {

dnnl::memory::dims dims_of(const Shape& s) {
  dnnl::memory::dims d;
  for (int i = 0; i < s.rank(); ++i) d.push_back(s.size(i));
  return d;
}

struct OneDnnConv {
  dnnl::memory::desc src, weights, dst, scratch;
  std::shared_ptr<dnnl::convolution_forward> conv;
};

// A oneDNN convolution over plain row-major layouts, or null when oneDNN cannot take it.
Kernel onednn_conv(const Shape& x, const Shape& w, const Shape& y, const ir::ConvAttrs& a) {
  using tag = dnnl::memory::format_tag;
  int sp = x.rank() - 2;
  if (sp < 1 || sp > 3 || (x.dtype() != DType::f32 && x.dtype() != DType::bf16)) return nullptr;
  for (int i = 0; i < sp; ++i) {
    if (a.pad_low[i] < 0 || a.pad_high[i] < 0) return nullptr;
  }
  if (x.numel() == 0 || y.numel() == 0) return nullptr;
  auto dt = x.dtype() == DType::f32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16;
  const tag act[] = {tag::ncw, tag::nchw, tag::ncdhw};
  const tag wei[] = {tag::oiw, tag::oihw, tag::oidhw};
  const tag gwei[] = {tag::goiw, tag::goihw, tag::goidhw};
  dnnl::memory::dims wd = dims_of(w);
  if (a.groups > 1) {  // {G, O/G, C/G, spatial...}
    wd[0] /= a.groups;
    wd.insert(wd.begin(), a.groups);
  }
  dnnl::memory::dims strides(a.strides.begin(), a.strides.end());
  dnnl::memory::dims dilates, pad_l(a.pad_low.begin(), a.pad_low.end()),
      pad_r(a.pad_high.begin(), a.pad_high.end());
  for (int64_t d : a.dilations) dilates.push_back(d - 1);  // oneDNN counts the gaps
  try {
    dnnl::engine& engine = onednn::engine();
    // A primitive over `batch` images, planned for one thread with a scratchpad it is given.
    auto plan = [=](int64_t batch) {
      dnnl::memory::dims xd = dims_of(x), yd = dims_of(y);
      xd[0] = yd[0] = batch;
      dnnl::memory::desc src(xd, dt, act[sp - 1]);
      dnnl::memory::desc weights(wd, dt, a.groups > 1 ? gwei[sp - 1] : wei[sp - 1]);
      dnnl::memory::desc dst(yd, dt, act[sp - 1]);
      dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                           dnnl::algorithm::convolution_direct, src, weights, dst,
                                           strides, dilates, pad_l, pad_r);
      dnnl::convolution_forward::primitive_desc pd(desc, onednn::single_thread(), engine);
      return OneDnnConv{src, weights, dst, pd.scratchpad_desc(),
                        std::make_shared<dnnl::convolution_forward>(pd)};
    };
    plan(x.size(0));  // throws here, at compile time, what oneDNN cannot take
    // oneDNN inside the pool (onednn.h): each thread over its own slice of the batch.
    struct Slices {
      std::once_flag planned;
      std::vector<std::pair<int64_t, OneDnnConv>> parts;  // first image, primitive
    };
    auto slices = std::make_shared<Slices>();
    const int64_t N = x.size(0), x_image = x.bytes() / N, y_image = y.bytes() / N;
    return [=](std::span<const std::byte* const> in, std::byte* out, ThreadPool& pool) {
      std::call_once(slices->planned, [&] {
        const int64_t per = (N + pool.size() - 1) / pool.size();
        for (int64_t n0 = 0; n0 < N; n0 += per)
          slices->parts.push_back({n0, plan(std::min(per, N - n0))});
      });
      pool.parallel_for(static_cast<int64_t>(slices->parts.size()), 1, [&](int64_t p0, int64_t p1) {
        for (int64_t i = p0; i < p1; ++i) {
          const auto& [n0, c] = slices->parts[i];
          onednn::execute(
              *c.conv, c.scratch,
              {{DNNL_ARG_SRC,
                dnnl::memory(c.src, engine, const_cast<std::byte*>(in[0] + n0 * x_image))},
               {DNNL_ARG_WEIGHTS, dnnl::memory(c.weights, engine, const_cast<std::byte*>(in[1]))},
               {DNNL_ARG_DST, dnnl::memory(c.dst, engine, out + n0 * y_image)}});
        }
      });
    };
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

}  // namespace

Kernel make_conv_kernel(const ir::Graph& g, ir::ValueId id) {
  const ir::Node& n = g.node(id);
  if (n.op != ir::Op::convolution) return nullptr;
  const auto a = n.attr<ir::ConvAttrs>();
  Shape x = g.node(n.inputs[0]).shape, w = g.node(n.inputs[1]).shape, y = n.shape;
  if (Kernel fast = onednn_conv(x, w, y, a)) return fast;
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
