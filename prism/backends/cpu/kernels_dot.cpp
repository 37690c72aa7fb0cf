// dot_general on the CPU: operands are viewed as batched matrices {B, M, K} x {B, K, N}
// (transposed views need no copy; other layouts are copied once), then multiplied by oneDNN
// (f32, bf16 with AMX where the CPU has it), by gemm.h's f32 kernels for bf16 where oneDNN
// has no bf16 products (before AVX-512), or by a plain loop for the other dtypes.
//
// oneDNN runs single-threaded inside the pool: each pool thread multiplies its own slice of
// the output columns (and so reads only its slice of the weights). With oneDNN's own OpenMP
// threads instead, they spin for milliseconds after every product, taking the cores from
// the pool's kernels that follow (a Llama-1B-shaped prefill ran 11 % slower).

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string_view>
#include <vector>

#include "prism/backends/cpu/aligned.h"
#include "prism/backends/cpu/amx_gemm.h"
#include "prism/backends/cpu/amx_rows.h"
#include "prism/backends/cpu/bf16_products.h"
#include "prism/backends/cpu/dot_rows.h"
#include "prism/backends/cpu/gemm.h"
#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/onednn.h"
#include "prism/backends/cpu/simd.h"
#include "prism/backends/cpu/storage.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/core/error.h"

namespace prism::cpu {
namespace {

// How one operand maps onto a matrix: the order of its axes in memory, whether the matrix is
// stored transposed, and the copy that makes it canonical when no view fits.
struct Operand {
  Shape shape;
  std::vector<int> order;   // batch, rows, cols in the canonical order
  bool transposed = false;  // memory holds {B, cols, rows}
  bool needs_copy = false;  // neither layout: copy into `order`
  int64_t batch = 1, rows = 1, cols = 1;

  std::array<int64_t, 3> strides() const {  // in elements, for dims {batch, rows, cols}
    if (transposed) return {rows * cols, 1, rows};
    return {rows * cols, cols, 1};
  }
};

bool is_identity(const std::vector<int>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != static_cast<int>(i)) return false;
  return true;
}

Operand describe(const Shape& s, const std::vector<int>& batch, const std::vector<int>& rows,
                 const std::vector<int>& cols) {
  Operand o;
  o.shape = s;
  for (int a : batch) o.batch *= s.size(a);
  for (int a : rows) o.rows *= s.size(a);
  for (int a : cols) o.cols *= s.size(a);
  std::vector<int> straight = batch, flipped = batch;
  straight.insert(straight.end(), rows.begin(), rows.end());
  straight.insert(straight.end(), cols.begin(), cols.end());
  flipped.insert(flipped.end(), cols.begin(), cols.end());
  flipped.insert(flipped.end(), rows.begin(), rows.end());
  o.order = straight;
  if (is_identity(straight)) return o;
  if (is_identity(flipped)) {
    o.transposed = true;
    return o;
  }
  o.needs_copy = true;
  return o;
}

// Copies an operand into its canonical {B, rows, cols} layout.
void make_canonical(const Operand& o, const std::byte* src, std::byte* dst, ThreadPool& pool) {
  std::vector<Dim> dims;
  std::array<int64_t, kMaxRank> src_stride{};
  auto st = o.shape.strides();
  for (size_t i = 0; i < o.order.size(); ++i) {
    dims.push_back({Tag(), o.shape.size(o.order[i])});
    src_stride[i] = st[o.order[i]];
  }
  Shape canon(o.shape.dtype(), dims);
  strided_copy(canon, size_of(o.shape.dtype()), src, 0, src_stride, dst, 0, canon.strides(), pool);
}

// fn(n0, n1) over tapered chunks of the columns [0, cols), each a whole number of `unit`
// columns but the last: whole blocks of weight_layout.h's rows (kWeightBlockRows), so that
// blocked weights are read a block at a time, or AMX's 16 rows of unblocked weights.
void for_column_chunks(ThreadPool& pool, int64_t cols, int64_t unit,
                       const std::function<void(int64_t, int64_t)>& fn) {
  pool.parallel_for_tapered(
      (cols + unit - 1) / unit, std::max<int64_t>(1, 16 / unit),
      [&](int64_t u0, int64_t u1) { fn(u0 * unit, std::min(u1 * unit, cols)); });
}

class DotKernel {
  struct Slice;  // one oneDNN product over a slice of the output columns

 public:
  DotKernel(const ir::Graph& g, const ir::Node& n) : out_(n.shape) {
    const auto& a = n.attr<ir::DotAttrs>();
    const Shape& ls = g.node(n.inputs[0]).shape;
    const Shape& rs = g.node(n.inputs[1]).shape;
    std::vector<int> lfree, rfree;
    for (int i = 0; i < ls.rank(); ++i) {
      if (!contains(a.lhs_batch, i) && !contains(a.lhs_contract, i)) lfree.push_back(i);
    }
    for (int i = 0; i < rs.rank(); ++i) {
      if (!contains(a.rhs_batch, i) && !contains(a.rhs_contract, i)) rfree.push_back(i);
    }
    lhs_ = describe(ls, a.lhs_batch, lfree, a.lhs_contract);
    rhs_ = describe(rs, a.rhs_batch, a.rhs_contract, rfree);
    DType t = ls.dtype();
    // One row (decoding one sequence): our own matrix-vector loops, which read each weight
    // once. From two rows on (batched decoding), the matrix products, which read each weight
    // once for all rows, where the row-by-row loops read it once per row: 4 conversations of
    // Llama 1B decoded in 145 ms a step instead of 215 (prism-bench decode-batch).
    small_ = (t == DType::f32 || t == DType::bf16) && lhs_.batch * lhs_.rows <= kSmallRows &&
             !lhs_.transposed && rhs_.cols > 0;
    // 2-16 rows of bf16 against weights stored {n, k} (batched decoding): our own kernels
    // where rows_kernel() (dot_rows.h) says so: AMX tiles (amx_rows.h) for weights blocked or
    // not, which keep the product bound by reading the weights, or for blocked weights f32
    // FMAs or vdpbf16ps, whichever this CPU runs faster (the others then go to oneDNN).
    // oneDNN's AMX products took 153 ms a step for 16 conversations of Llama 1B, against 94 ms
    // for one.
    // Before AVX-512 (RowsKernel::widen), f32 FMAs on the weights as stored, widened in
    // cache: oneDNN would widen them into memory first (8 rows of Llama 1B's shapes took
    // 1.17 s on an AMD EPYC with AVX2).
    const bool few_rows = t == DType::bf16 && out_.dtype() == DType::bf16 && lhs_.batch == 1 &&
                          rhs_.batch == 1 && lhs_.rows >= 2 && lhs_.rows <= kAmxMaxRows &&
                          !lhs_.transposed && !lhs_.needs_copy && rhs_.transposed &&
                          !rhs_.needs_copy && lhs_.cols > 0 && rhs_.cols > 0;
    const bool tiles =
        lhs_.cols % kAmxDepth == 0 && rhs_.cols % kAmxColumns == 0 && simd::current().avx512_bf16;
    const RowsKernel kernel = few_rows ? rows_kernel() : RowsKernel::onednn;
    if (kernel == RowsKernel::widen || (kernel != RowsKernel::onednn && tiles)) {
      rows_ = kernel;
      small_ = false;
    }
    if (!small_ && (t == DType::f32 || t == DType::bf16) &&
        lhs_.batch * lhs_.rows * lhs_.cols > 0 && rhs_.cols > 0) {
      use_dnnl_ = true;
    }
    // Weights {n, k} that the executable may keep blocked (weight_layout.h).
    blockable_ = t == DType::bf16 && out_.dtype() == DType::bf16 && rhs_.transposed &&
                 !rhs_.needs_copy && !lhs_.needs_copy && !lhs_.transposed && lhs_.batch == 1 &&
                 cpu::blockable(Shape(DType::bf16, {{"n", rhs_.cols}, {"k", rhs_.rows}}));
    // A prompt's rows against weights kept blocked: prism's AMX tiles where the CPU has them
    // and they were measured the faster (bf16_tile_products, asked when the slices are
    // planned).
    tiles_ = blockable_ && use_dnnl_ && lhs_.rows > kAmxMaxRows && lhs_.cols % 32 == 0 &&
             lhs_.strides()[2] == 1 && amx_gemm_available();
  }

  void operator()(std::span<const std::byte* const> in, std::byte* out, ThreadPool& pool) const {
    const std::byte* l = in[0];
    const std::byte* r = in[1];
    std::unique_ptr<std::byte[]> lcopy, rcopy;
    if (lhs_.needs_copy) {
      lcopy = std::make_unique<std::byte[]>(lhs_.shape.bytes());
      make_canonical(lhs_, l, lcopy.get(), pool);
      l = lcopy.get();
    }
    if (rhs_.needs_copy) {
      rcopy = std::make_unique<std::byte[]>(rhs_.shape.bytes());
      make_canonical(rhs_, r, rcopy.get(), pool);
      r = rcopy.get();
    }
    if (out_.numel() == 0) return;
    if (lhs_.cols == 0) {
      std::memset(out, 0, out_.bytes());
      return;
    }
    if (small_) {
      small(l, r, out, pool);
      return;
    }
    if (takes_rows(r)) {
      const bool blocked = rhs_blocked(r);
      const RowsInput x = rows_input(l, blocked);
      for_column_chunks(
          pool, rhs_.cols, blocked ? kWeightBlockRows : kAmxColumns,
          [&](int64_t n0, int64_t n1) { rows_columns(l, x, r, out, n0, n1, blocked); });
      return;
    }
    if (!planned(pool).empty()) {
      const bool blocked = rhs_blocked(r);
      PRISM_CHECK(widened_ || !blocked || blocked_slices_.size() == slices_.size(),
                  "cpu: oneDNN planned no product for weights {} kept blocked", rhs_.shape.str());
      const float* x32 = widened_ ? widened_lhs(l, pool) : nullptr;
      const uint16_t* xt = tiled_ && blocked ? tiled_lhs(l, pool) : nullptr;
      pool.parallel_for_each(static_cast<int64_t>(slices_.size()), [&](int64_t s0, int64_t s1) {
        for (int64_t i = s0; i < s1; ++i) run_slice(i, l, r, out, blocked, x32, xt);
      });
      return;
    }
    loop(l, r, out, pool);
  }

  // What a group of products reading the same activations (make_dot_group_kernel) needs:
  // whether this one can join one (operands read in place, the same path), and its pieces.
  enum class Path { none, small, rows, slices };
  Path path(ThreadPool& pool) const {
    if (lhs_.needs_copy || rhs_.needs_copy || out_.numel() == 0 || lhs_.cols == 0) {
      return Path::none;
    }
    if (small_) return Path::small;
    if (rows_ == RowsKernel::amx) return Path::rows;
    if (rows_ == RowsKernel::fma || rows_ == RowsKernel::dpbf16 || rows_ == RowsKernel::widen) {
      planned(pool);  // oneDNN's slices, for the weights the kernel does not take
      return Path::rows;
    }
    return planned(pool).empty() ? Path::none : Path::slices;
  }
  bool same_lhs(const DotKernel& o) const {
    return lhs_.shape == o.lhs_.shape && lhs_.order == o.lhs_.order &&
           lhs_.transposed == o.lhs_.transposed && out_.dtype() == o.out_.dtype();
  }
  int64_t cols() const { return rhs_.cols; }
  // Whether the weights at r are kept blocked (weight_layout.h): the executable decides, on
  // each call, for the parameters only products read.
  bool rhs_blocked(const std::byte* r) const { return blockable_ && blocked(r); }
  bool blockable() const { return blockable_; }
  int64_t slice_count() const { return static_cast<int64_t>(slices_.size()); }

  // Whether the small path reads x in f32 (lhs_f32 below): not where the bf16 kernel
  // multiplies x as it is for all of k.
  bool reads_lhs_f32(const DotRowKernels& dots) const {
    const int64_t native = dots.bf16_native_block;
    return out_.dtype() == DType::f32 ||
           !(rhs_.transposed && native > 0 && lhs_.cols % native == 0);
  }

  // The small path's rows of x in f32, once for all the columns: the memory itself for f32,
  // nothing where it is not read, else widened into `storage`.
  const float* lhs_f32(const std::byte* l, const DotRowKernels& dots,
                       std::vector<float>& storage) const {
    if (out_.dtype() == DType::f32) return reinterpret_cast<const float*>(l);
    if (!reads_lhs_f32(dots)) return nullptr;
    const int64_t B = lhs_.batch, M = lhs_.rows, K = lhs_.cols;
    storage.resize(B * M * K);
    const uint16_t* src = reinterpret_cast<const uint16_t*>(l);
    for (int64_t i = 0; i < B * M * K; ++i) storage[i] = bf16_to_f32(src[i]);
    return storage.data();
  }

  // Whether the weights at r take the path of a few rows (see the constructor).
  bool takes_rows(const std::byte* r) const {
    return rows_ == RowsKernel::amx ||
           ((rows_ == RowsKernel::fma || rows_ == RowsKernel::dpbf16) && rhs_blocked(r)) ||
           (rows_ == RowsKernel::widen && !rhs_blocked(r));
  }

  // What the path of a few rows reads besides x as it is: for AMX and weights that are not
  // blocked, x regrouped (pack_rows_for_amx); for the FMA kernels, x in f32 (for widen, laid
  // out by pack_rows_plain).
  struct RowsInput {
    std::vector<uint16_t> packed;
    std::vector<float> f32;
  };
  RowsInput rows_input(const std::byte* l, bool blocked) const {
    RowsInput x;
    const auto* bf16 = reinterpret_cast<const uint16_t*>(l);
    const int64_t M = lhs_.rows, K = lhs_.cols;
    if (rows_ == RowsKernel::amx && !blocked) {
      x.packed.resize(M * K);
      pack_rows_for_amx(bf16, K, M, K, x.packed.data());
    } else if (rows_ == RowsKernel::widen) {
      x.f32.resize(M * plain_rows_stride(K));
      dot_row_kernels().pack_rows_plain(bf16, K, M, K, x.f32.data());
    } else if (rows_ == RowsKernel::fma) {
      x.f32.resize(M * K);
      for (int64_t i = 0; i < M * K; ++i) x.f32[i] = bf16_to_f32(bf16[i]);
    }
    return x;
  }

  // Output columns [n0, n1) of the path of a few rows, `blocked` being rhs_blocked(r) and x
  // rows_input(l, blocked). The kernels work on whole blocks of 64 (blocked) or 16 weight
  // rows (AMX), or on any rows (widen); the columns around [n0, n1) they add are computed and
  // not stored.
  void rows_columns(const std::byte* l, const RowsInput& x, const std::byte* r, std::byte* out,
                    int64_t n0, int64_t n1, bool blocked) const {
    const int64_t M = lhs_.rows, K = lhs_.cols, N = rhs_.cols;
    const int64_t unit = rows_ == RowsKernel::widen ? 1 : blocked ? kWeightBlockRows : kAmxColumns;
    const int64_t a0 = n0 / unit * unit, a1 = (n1 + unit - 1) / unit * unit, width = a1 - a0;
    thread_local std::vector<float> sums;
    sums.resize(M * width);
    const auto* w = reinterpret_cast<const uint16_t*>(r) + a0 * K;
    if (rows_ == RowsKernel::widen) {
      dot_row_kernels().f32_rows_plain(x.f32.data(), M, w, K, width, sums.data(), width);
    } else if (rows_ == RowsKernel::fma) {
      dot_row_kernels().f32_rows_blocked(x.f32.data(), K, M, w, K, width / unit, sums.data(),
                                         width);
    } else if (rows_ == RowsKernel::dpbf16) {
      dot_row_kernels().bf16_rows_blocked(reinterpret_cast<const uint16_t*>(l), K, M, w, K,
                                          width / unit, sums.data(), width);
    } else if (blocked) {
      amx_rows_blocked(reinterpret_cast<const uint16_t*>(l), K, M, w, K, width / unit, sums.data(),
                       width);
    } else {
      amx_rows_plain(x.packed.data(), M, w, K, K, width, sums.data(), width);
    }
    auto* y = reinterpret_cast<uint16_t*>(out);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = n0; n < n1; ++n) y[m * N + n] = f32_to_bf16(sums[m * width + n - a0]);
  }

  // Slice i of the planned products, `blocked` being rhs_blocked(r).
  // x32: the activations as widened_lhs lays them out, where the product is widened; xt: as
  // tiled_lhs lays them out, where it runs on prism's AMX tiles.
  void run_slice(int64_t i, const std::byte* l, const std::byte* r, std::byte* out, bool blocked,
                 const float* x32 = nullptr, const uint16_t* xt = nullptr) const {
    const int64_t elem = static_cast<int64_t>(size_of(out_.dtype()));
    const int64_t wei_step = rhs_.strides()[2] * elem;  // a block of 64 starts at 64 rows too
    if (widened_) {
      run_widened_slice(slices_[i], x32, r, out, blocked);
      return;
    }
    const Slice& s = blocked ? blocked_slices_[i] : slices_[i];
    if (xt) {  // tiled_ and blocked: the slice's blocks of 64 weight rows
      const int64_t N = rhs_.cols, width = std::min(slice_width_, N - s.n0);
      amx_gemm_blocked(xt, lhs_.rows, lhs_.cols,
                       reinterpret_cast<const uint16_t*>(r + s.n0 * wei_step), width / 64,
                       reinterpret_cast<uint16_t*>(out) + s.n0, N);
      return;
    }
    std::byte* dst = out + s.n0 * elem;
    thread_local std::vector<std::byte> staging;
    if (s.staged) {
      staging.resize(s.dst.get_size());
      dst = staging.data();
    }
    dnnl::engine& engine = onednn::engine();
    onednn::execute(*s.matmul, s.scratch,
                    {{DNNL_ARG_SRC, dnnl::memory(s.src, engine, const_cast<std::byte*>(l))},
                     {DNNL_ARG_WEIGHTS,
                      dnnl::memory(s.wei, engine, const_cast<std::byte*>(r + s.n0 * wei_step))},
                     {DNNL_ARG_DST, dnnl::memory(s.dst, engine, dst)}});
    if (s.staged) {  // rows of the slice into the rows of the whole
      const int64_t M = lhs_.rows, N = rhs_.cols, row = s.dst.get_size() / M;
      for (int64_t m = 0; m < M; ++m)
        std::memcpy(out + (m * N + s.n0) * elem, staging.data() + m * row, row);
    }
  }

 private:
  // The slices, planned on the first call, when the pool's size is known: oneDNN's, or for
  // bf16 products where bf16_products.h chose f32 FMAs, gemm.h's (widened); none when neither
  // takes the product (the plain loop covers it).
  const std::vector<Slice>& planned(ThreadPool& pool) const {
    if (use_dnnl_) {
      std::call_once(planned_, [&] {
        if (lhs_.batch == 1 && widens_bf16_product(lhs_.shape.dtype(), out_.dtype())) {
          make_widened_slices();
          widened_ = true;
          return;
        }
        try {
          make_slices(out_.dtype(), pool.size());
          tiled_ = tiles_ && bf16_tile_products().tiles && !slices_.empty();
        } catch (const dnnl::error&) {
          slices_.clear();
          blocked_slices_.clear();
        }
      });
    }
    return slices_;
  }

  // Products over slices of the output columns (a multiple of 64 wide, 512 or more), each planned
  // by oneDNN for one thread, several a pool thread: the pool hands them out as threads come free,
  // so a thread slowed down for a while (a shared core) does fewer. With one slice a thread, the
  // product waited for the slowest: 512-token prefills ran 4-14 % slower in alternating runs. Equal
  // slices share a primitive.
  //
  // oneDNN's fastest kernels (brgemm; as of oneDNN 2.6) take a product only into a dense
  // output of its own: not into a slice of the columns of a wider one, nor with a batch axis.
  // So an unbatched slice is multiplied into the thread's staging block and copied into place
  // where oneDNN plans brgemm for it; otherwise oneDNN writes the columns in place with its
  // older gemm. A 512-token prefill of the Llama-1B-shaped checkpoint ran 9 % faster staged
  // (319 against 289 tok/s, medians of five alternating runs).
  void make_slices(DType t, int threads) const {
    auto dt = t == DType::f32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16;
    auto ls3 = lhs_.strides(), rs3 = rhs_.strides();
    const int64_t B = lhs_.batch, M = lhs_.rows, K = lhs_.cols, N = rhs_.cols;
    const int64_t width = slice_width(N, threads);
    slice_width_ = width;
    Slice last, last_blocked;
    int64_t last_width = 0;
    for (int64_t n0 = 0; n0 < N; n0 += width) {
      const int64_t w = std::min(width, N - n0);
      if (w != last_width) {
        last = plan_slice(dt, B, M, K, N, w, ls3, rs3, false);
        if (blockable_) last_blocked = plan_slice(dt, B, M, K, N, w, ls3, rs3, true);
        last_width = w;
      }
      Slice s = last;
      s.n0 = n0;
      slices_.push_back(std::move(s));
      if (blockable_) {
        Slice b = last_blocked;
        b.n0 = n0;
        blocked_slices_.push_back(std::move(b));
      }
    }
  }

  // The columns of make_slices' slices: kSlicesPerThread a thread, a multiple of 64, at least
  // kMinSliceWidth.
  static int64_t slice_width(int64_t N, int threads) {
    const int64_t slices = int64_t{threads} * kSlicesPerThread;
    return std::max<int64_t>(kMinSliceWidth, (N + slices - 1) / slices + 63) / 64 * 64;
  }

  // Slices for bf16 operands multiplied in f32 by gemm.h's kernels (run_widened_slice):
  // kGemmColumns columns each, the pool handing them out as threads come free.
  void make_widened_slices() const {
    const int64_t N = rhs_.cols;
    for (int64_t n0 = 0; n0 < N; n0 += kGemmColumns) {
      Slice s;
      s.n0 = n0;
      s.width = std::min(kGemmColumns, N - n0);
      slices_.push_back(std::move(s));
    }
  }

 public:
  // The activations of a widened product (widened_activations), once for all its slices (and
  // for all the products of a group, which share them).
  const float* widened_lhs(const std::byte* l, ThreadPool& pool) const {
    const auto ls = lhs_.strides();
    return widened_activations(reinterpret_cast<const uint16_t*>(l), ls[1], ls[2], lhs_.rows,
                               lhs_.cols, pool);
  }
  bool widened() const { return widened_; }

  // The activations of a product on prism's AMX tiles (tile_activations), once for all its
  // slices (and for all the products of a group, which share them).
  const uint16_t* tiled_lhs(const std::byte* l, ThreadPool& pool) const {
    return tile_activations(reinterpret_cast<const uint16_t*>(l), lhs_.strides()[1], lhs_.rows,
                            lhs_.cols, pool);
  }
  bool tiled() const { return tiled_; }

 private:
  // A slice of a bf16 product on f32 FMAs (bf16_products.h): gemm.h's products, the weights
  // (blocked or not) widened as they are read, the sums rounded to bf16 as a bf16 product with
  // f32 sums rounds them. `packed`: widened_lhs.
  void run_widened_slice(const Slice& s, const float* packed, const std::byte* r, std::byte* out,
                         bool blocked) const {
    const auto rs = rhs_.strides();
    const auto* w = reinterpret_cast<const uint16_t*>(r);
    gemm_columns(packed, lhs_.rows, lhs_.cols,
                 blocked ? GemmWeights{w, 0, 0, lhs_.cols} : GemmWeights{w, rs[1], rs[2]}, s.n0,
                 s.n0 + s.width, {out, rhs_.cols, true});
  }

  using Strides = std::array<int64_t, 3>;
  // `blocked`: the weights in weight_layout.h's blocks, which oneDNN calls BA16a64b2a.
  static Slice plan_slice(dnnl::memory::data_type dt, int64_t B, int64_t M, int64_t K, int64_t N,
                          int64_t w, const Strides& ls3, const Strides& rs3, bool blocked) {
    using dnnl::memory;
    auto plan = [](Slice& s) {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(s.src, s.wei, s.dst),
                                      onednn::single_thread(), onednn::engine());
      s.matmul = std::make_shared<dnnl::matmul>(pd);
      s.scratch = pd.scratchpad_desc();
      return std::string_view(pd.impl_info_str()).starts_with("brg");
    };
    Slice s;
    if (B == 1) {
      s.src = memory::desc({M, K}, dt, {ls3[1], ls3[2]});
      s.wei = blocked ? memory::desc({K, w}, dt, memory::format_tag::BA16a64b2a)
                      : memory::desc({K, w}, dt, {rs3[1], rs3[2]});
      s.dst = memory::desc({M, w}, dt, {w, 1});
      s.staged = w != N;
      if (plan(s) || blocked) return s;
    }
    s.src = memory::desc({B, M, K}, dt, {ls3[0], ls3[1], ls3[2]});
    s.wei = memory::desc({B, K, w}, dt, {rs3[0], rs3[1], rs3[2]});
    s.dst = memory::desc({B, M, w}, dt, {M * N, N, 1});
    s.staged = false;
    plan(s);
    return s;
  }

  static bool contains(const std::vector<int>& v, int x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  }

  void loop(const std::byte* l, const std::byte* r, std::byte* out, ThreadPool& pool) const {
    auto ls = lhs_.strides(), rs = rhs_.strides();
    int64_t M = lhs_.rows, K = lhs_.cols, N = rhs_.cols;
    visit_storage(out_.dtype(), [&](auto tag) {
      using S = decltype(tag);
      using A = std::conditional_t<std::is_same_v<S, double>, double,
                                   std::conditional_t<std::is_integral_v<S>, int64_t, float>>;
      const S* a = reinterpret_cast<const S*>(l);
      const S* b = reinterpret_cast<const S*>(r);
      S* y = reinterpret_cast<S*>(out);
      pool.parallel_for(lhs_.batch * M, 1, [&](int64_t t0, int64_t t1) {
        std::vector<A> acc(N);
        for (int64_t t = t0; t < t1; ++t) {
          int64_t bi = t / M, m = t % M;
          std::fill(acc.begin(), acc.end(), A(0));
          for (int64_t k = 0; k < K; ++k) {
            A av = to_compute<A>(a[bi * ls[0] + m * ls[1] + k * ls[2]]);
            const S* brow = b + bi * rs[0] + k * rs[1];
            for (int64_t n = 0; n < N; ++n) acc[n] += av * to_compute<A>(brow[n * rs[2]]);
          }
          for (int64_t n = 0; n < N; ++n) y[t * N + n] = to_storage<S>(acc[n]);
        }
      });
    });
  }

  static constexpr int64_t kSmallRows = 1;
  static constexpr int kSlicesPerThread = 4;
  // Narrower slices lose more to oneDNN's per-call work than they gain in balance: in a
  // 512-token prefill at Llama 1B's shapes the q, k and v projections took 10 % less time and
  // the down projection 6 % less with slices of 512 columns than with slices of 64 or 256.
  static constexpr int64_t kMinSliceWidth = 512;

  // y[b, m, :] = x[b, m, :] . W[b] for a handful of rows, parallel over output columns.
  void small(const std::byte* l, const std::byte* r, std::byte* out, ThreadPool& pool) const {
    std::vector<float> storage;
    const DotRowKernels dots = dot_row_kernels();
    const float* x = lhs_f32(l, dots, storage);
    const bool blocked = rhs_blocked(r);
    for_column_chunks(pool, rhs_.cols, blocked ? kWeightBlockRows : 1, [&](int64_t n0, int64_t n1) {
      small_columns(dots, l, x, r, out, n0, n1, blocked);
    });
  }

 public:
  // Output columns [n0, n1) of the small path with `dots`, x being lhs_f32(l, dots) and
  // `blocked` rhs_blocked(r).
  void small_columns(const DotRowKernels& dots, const std::byte* l, const float* x,
                     const std::byte* r, std::byte* out, int64_t n0, int64_t n1,
                     bool blocked) const {
    int64_t B = lhs_.batch, M = lhs_.rows, K = lhs_.cols, N = rhs_.cols;
    bool bf16 = out_.dtype() == DType::bf16;
    auto ls = lhs_.strides(), rs = rhs_.strides();
    auto store = [&](int64_t at, float v) {
      if (bf16) {
        reinterpret_cast<uint16_t*>(out)[at] = f32_to_bf16(v);
      } else {
        reinterpret_cast<float*>(out)[at] = v;
      }
    };
    std::vector<float> acc;
    if (blocked) {  // the blocks that hold [n0, n1), one row of x at a time
      const int64_t b0 = n0 / kWeightBlockRows;
      const int64_t b1 = (n1 + kWeightBlockRows - 1) / kWeightBlockRows;
      acc.resize((b1 - b0) * kWeightBlockRows);
      const uint16_t* w = reinterpret_cast<const uint16_t*>(r) + b0 * kWeightBlockRows * K;
      for (int64_t m = 0; m < M; ++m) {
        dots.bf16_blocked(reinterpret_cast<const uint16_t*>(l) + m * ls[1], w, K, b1 - b0,
                          acc.data());
        for (int64_t n = n0; n < n1; ++n) store(m * N + n, acc[n - b0 * kWeightBlockRows]);
      }
      return;
    }
    for (int64_t b = 0; b < B; ++b) {
      if (rhs_.transposed) {  // W stored [N][K]: dots of rows, four at a time
        // dot(m, w, sum): row m of x against the rows w, bf16 or f32 like the weights.
        auto row_groups = [&](auto weight_type, auto dot) {
          using W = decltype(weight_type);
          for_row_groups(n0, n1, [&](const int64_t* rows) {
            const W* w[kDotRows];
            for (int i = 0; i < kDotRows; ++i)
              w[i] = reinterpret_cast<const W*>(r) + b * rs[0] + rows[i] * rs[2];
            for (int64_t m = 0; m < M; ++m) {
              float sum[kDotRows];
              dot(m, w, sum);
              for (int i = 0; i < kDotRows; ++i) store((b * M + m) * N + rows[i], sum[i]);
            }
          });
        };
        if (bf16) {
          row_groups(uint16_t{}, [&](int64_t m, const uint16_t* const* w, float* sum) {
            dots.bf16(reinterpret_cast<const uint16_t*>(l) + b * ls[0] + m * ls[1],
                      x ? x + (b * M + m) * K : nullptr, w, K, sum);
          });
        } else {
          row_groups(float{}, [&](int64_t m, const float* const* w, float* sum) {
            dots.f32(&x[(b * M + m) * K], w, K, sum);
          });
        }
      } else {  // W stored [K][N]: accumulate scaled rows, four rows (streams) a pass
        const int64_t width = n1 - n0;
        acc.assign(M * width, 0.0f);
        auto accumulate = [&](auto weight_type) {
          using W = decltype(weight_type);
          auto f = [](W v) {
            if constexpr (std::is_same_v<W, uint16_t>) {
              return bf16_to_f32(v);
            } else {
              return v;
            }
          };
          const W* base = reinterpret_cast<const W*>(r) + b * rs[0] + n0;
          int64_t k = 0;
          for (; k + 4 <= K; k += 4) {  // in k's order, as one row at a time would add
            const W *w0 = base + k * rs[1], *w1 = w0 + rs[1], *w2 = w1 + rs[1], *w3 = w2 + rs[1];
            for (int64_t m = 0; m < M; ++m) {
              const float* xk = &x[(b * M + m) * K + k];
              const float x0 = xk[0], x1 = xk[1], x2 = xk[2], x3 = xk[3];
              float* a = &acc[m * width];
              for (int64_t i = 0; i < width; ++i) {
                float v = a[i];
                v += x0 * f(w0[i]);
                v += x1 * f(w1[i]);
                v += x2 * f(w2[i]);
                v += x3 * f(w3[i]);
                a[i] = v;
              }
            }
          }
          for (; k < K; ++k) {
            const W* w = base + k * rs[1];
            for (int64_t m = 0; m < M; ++m) {
              const float xv = x[(b * M + m) * K + k];
              float* a = &acc[m * width];
              for (int64_t i = 0; i < width; ++i) a[i] += xv * f(w[i]);
            }
          }
        };
        if (bf16) {
          accumulate(uint16_t{});
        } else {
          accumulate(float{});
        }
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = n0; n < n1; ++n) store((b * M + m) * N + n, acc[m * (n1 - n0) + n - n0]);
      }
    }
  }

 private:
  Shape out_;
  Operand lhs_, rhs_;
  bool small_ = false;
  RowsKernel rows_ = RowsKernel::onednn;  // the path of a few rows (see the constructor)
  struct Slice {
    int64_t n0 = 0;     // first output column
    int64_t width = 0;  // its columns (widened slices)
    dnnl::memory::desc src, wei, dst, scratch;
    bool staged = false;  // written into the thread's staging block, then copied into place
    std::shared_ptr<dnnl::matmul> matmul;
  };
  bool use_dnnl_ = false;
  bool blockable_ = false;
  mutable bool widened_ = false;  // bf16 operands multiplied in f32 (make_widened_slices)
  bool tiles_ = false;            // prism's AMX tiles could take the product (blocked weights)
  mutable bool tiled_ = false;    // and take it: the slices run on them where weights are blocked
  mutable int64_t slice_width_ = 0;  // make_slices' width
  mutable std::once_flag planned_;
  mutable std::vector<Slice> slices_;
  mutable std::vector<Slice> blocked_slices_;  // the same with the weights blocked
};

}  // namespace

bool dot_reads_blockable_weights(const ir::Graph& g, ir::ValueId id) {
  const ir::Node& n = g.node(id);
  return n.op == ir::Op::dot && DotKernel(g, n).blockable();
}

const float* widened_activations(const uint16_t* x, int64_t row_stride, int64_t col_stride,
                                 int64_t M, int64_t K, ThreadPool& pool) {
  thread_local std::vector<float> packed;
  packed.resize(std::max(packed.size(), static_cast<size_t>(gemm_lhs_floats(M, K))));
  float* out = packed.data();  // the pool's threads have thread_locals of their own
  pool.parallel_for((M + kGemmPanelRows - 1) / kGemmPanelRows, 2, [&](int64_t p0, int64_t p1) {
    gemm_pack_lhs(x, row_stride, col_stride, M, K, p0, p1, out);
  });
  return out;
}

const uint16_t* tile_activations(const uint16_t* x, int64_t ldx, int64_t M, int64_t K,
                                 ThreadPool& pool) {
  // The caller's own buffer (the pool's threads have thread_locals of their own), 64-byte
  // aligned as the tile loads want it.
  thread_local AlignedBuffer<uint16_t> packed;
  uint16_t* out = packed.reserve(amx_gemm_packed_values(M, K));
  const int64_t groups = (M + kAmxGemmRows - 1) / kAmxGemmRows;
  pool.parallel_for(groups, 1, [&](int64_t g0, int64_t g1) {
    pack_rows_for_amx_gemm(x, ldx, M, K, g0 * kAmxGemmRows, g1 * kAmxGemmRows, out);
  });
  return out;
}

bool widens_bf16_product(DType lhs, DType out) {
  return lhs == DType::bf16 && out == DType::bf16 && bf16_products().path == Bf16Products::fma;
}

Kernel make_dot_kernel(const ir::Graph& g, ir::ValueId id) {
  const ir::Node& n = g.node(id);
  if (n.op != ir::Op::dot) return nullptr;
  auto kernel = std::make_shared<DotKernel>(g, n);
  return [kernel](std::span<const std::byte* const> in, std::byte* out, ThreadPool& pool) {
    (*kernel)(in, out, pool);
  };
}

namespace {

// Products that read the same activations (a layer's q, k and v projections, or its gate and
// up ones), run as one parallel loop over all their output columns: one start and one wait
// for the threads instead of one per product, and in decoding one tapered split of all their
// rows, so that the threads finish together once rather than at the end of every product.
class DotGroup {
 public:
  explicit DotGroup(std::vector<std::shared_ptr<DotKernel>> members)
      : members_(std::move(members)) {}

  // in: the activations, then each product's weights; outs: each product's output.
  void operator()(std::span<const std::byte* const> in, std::span<std::byte* const> outs,
                  ThreadPool& pool) const {
    std::call_once(planned_, [&] { plan(pool); });
    const std::byte* l = in[0];
    std::vector<char> blocked(members_.size());
    for (size_t m = 0; m < members_.size(); ++m) blocked[m] = members_[m]->rhs_blocked(in[1 + m]);
    if (path_ == DotKernel::Path::small) {
      std::vector<float> storage;
      const DotRowKernels dots = dot_row_kernels();
      // x in f32 if any product reads it (the same for all: they share x).
      const DotKernel* widens = members_[0].get();
      for (const auto& m : members_) {
        if (m->reads_lhs_f32(dots)) widens = m.get();
      }
      const float* x = widens->lhs_f32(l, dots, storage);
      for_column_chunks(
          pool, first_.back(), whole_blocks_ ? kWeightBlockRows : 1, [&](int64_t a0, int64_t a1) {
            for (size_t m = 0; m < members_.size(); ++m) {
              const int64_t lo = std::max(a0, first_[m]), hi = std::min(a1, first_[m + 1]);
              if (lo < hi) {
                members_[m]->small_columns(dots, l, x, in[1 + m], outs[m], lo - first_[m],
                                           hi - first_[m], blocked[m]);
              }
            }
          });
    } else if (path_ == DotKernel::Path::rows && all_take_rows(in)) {
      // x as the kernels read it, once for all (they share x).
      bool all_blocked = true;
      for (size_t m = 0; m < members_.size(); ++m) all_blocked = all_blocked && blocked[m];
      const DotKernel::RowsInput x = members_[0]->rows_input(l, all_blocked);
      const int64_t unit = whole_blocks_ && all_blocked ? kWeightBlockRows : kAmxColumns;
      for_column_chunks(pool, first_.back(), unit, [&](int64_t a0, int64_t a1) {
        for (size_t m = 0; m < members_.size(); ++m) {
          const int64_t lo = std::max(a0, first_[m]), hi = std::min(a1, first_[m + 1]);
          if (lo < hi) {
            members_[m]->rows_columns(l, x, in[1 + m], outs[m], lo - first_[m], hi - first_[m],
                                      blocked[m]);
          }
        }
      });
    } else if (path_ == DotKernel::Path::slices ||
               (path_ == DotKernel::Path::rows && !slices_.empty())) {
      // The widened products share x in f32 (all the members read x in the same layout).
      const DotKernel* widened = nullptr;
      for (const auto& m : members_)
        if (m->widened()) widened = m.get();
      const float* x32 = widened ? widened->widened_lhs(l, pool) : nullptr;
      // Likewise the products on AMX tiles, the packed x.
      const uint16_t* xt = nullptr;
      for (size_t m = 0; m < members_.size() && !xt; ++m)
        if (members_[m]->tiled() && blocked[m]) xt = members_[m]->tiled_lhs(l, pool);
      pool.parallel_for_each(static_cast<int64_t>(slices_.size()), [&](int64_t s0, int64_t s1) {
        for (int64_t i = s0; i < s1; ++i) {
          const auto [m, slice] = slices_[i];
          const bool tiled = members_[m]->tiled() && blocked[m];
          members_[m]->run_slice(slice, l, in[1 + m], outs[m], blocked[m], x32,
                                 tiled ? xt : nullptr);
        }
      });
    } else {  // one after the other
      for (size_t m = 0; m < members_.size(); ++m) {
        const std::byte* args[] = {l, in[1 + m]};
        (*members_[m])(args, outs[m], pool);
      }
    }
  }

 private:
  // Whether every member takes the path of a few rows with the weights it was given.
  bool all_take_rows(std::span<const std::byte* const> in) const {
    for (size_t m = 0; m < members_.size(); ++m)
      if (!members_[m]->takes_rows(in[1 + m])) return false;
    return true;
  }

  void plan(ThreadPool& pool) const {
    path_ = members_[0]->path(pool);
    for (const auto& m : members_) {
      if (m->path(pool) != path_) path_ = DotKernel::Path::none;
    }
    first_ = {0};
    whole_blocks_ = true;
    for (const auto& m : members_) {
      first_.push_back(first_.back() + m->cols());
      if (m->cols() % kWeightBlockRows != 0) whole_blocks_ = false;
    }
    for (size_t m = 0; m < members_.size(); ++m) {
      for (int64_t i = 0; i < members_[m]->slice_count(); ++i) slices_.emplace_back(m, i);
    }
  }

  std::vector<std::shared_ptr<DotKernel>> members_;
  mutable std::once_flag planned_;
  mutable DotKernel::Path path_ = DotKernel::Path::none;
  mutable std::vector<int64_t> first_;  // each product's first column in the whole; the total
  // Chunks of whole blocks of weight_layout.h's rows: every product's columns allow them.
  mutable bool whole_blocks_ = false;
  mutable std::vector<std::pair<size_t, int64_t>> slices_;  // (product, its slice)
};

}  // namespace

GroupKernel make_dot_group_kernel(const ir::Graph& g, std::span<const ir::ValueId> ids) {
  std::vector<std::shared_ptr<DotKernel>> members;
  for (ir::ValueId id : ids) {
    const ir::Node& n = g.node(id);
    // Products of quantized weights have kernels of their own (kernels_quant.cpp).
    if (n.op != ir::Op::dot || g.node(n.inputs[1]).op == ir::Op::dequantize) return nullptr;
    members.push_back(std::make_shared<DotKernel>(g, n));
    if (!members.back()->same_lhs(*members.front())) return nullptr;
  }
  if (members.size() < 2) return nullptr;
  auto group = std::make_shared<DotGroup>(std::move(members));
  return [group](std::span<const std::byte* const> in, std::span<std::byte* const> outs,
                 ThreadPool& pool) { (*group)(in, outs, pool); };
}
}  // namespace prism::cpu
