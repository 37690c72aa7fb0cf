// Weights kept in ggml's quantized block formats (the dequantize op, ir/ops.def) on the CPU.
//
// A product of activations by dequantized weights, dot(x, dequantize(w)), reads the blocks
// where they are: the executable does not materialize such a dequantize (it is an alias of
// its bytes: folded_dequantizes below), and the product's kernel dequantizes as it
// multiplies. Up to kQuantRows rows of activations (decoding, batched decoding) go through
// quant_rows.h, which dequantizes each block in registers and multiplies it with every row:
// the weights are read once, at their quantized size. More rows (prefill) are computed a
// panel of weight rows at a time: the panel is dequantized into the activations' dtype
// (quant_rows.h, in registers, 0.1 ns a weight), then
// multiplied as a float product (kernels_dot.cpp); a panel is small enough to stay in cache
// while the product reads it, and the dequantization is a small part of the product's work.
// Where a prompt's bf16 products run on prism's AMX tiles (amx_gemm.h), each thread instead
// dequantizes its blocks of 64 weight rows straight into the tiles' layout and multiplies them
// with the activations packed once for the step (QuantDot::tiled_blocks): a 512-token prefill
// of a Llama-1B-shaped Q4_K_M file went from 515 to 622 tokens a second (Intel Xeon with AMX,
// 2 cores), within a few percent of the same weights in bf16.
//
// The row kernels take the activations in one of two ways (quant_activations() below):
// rounded to ggml's 8-bit blocks once per product and multiplied in integers (llama.cpp's
// arithmetic; AVX-512 VNNI or AVX2), the default where the CPU has those kernels for the
// weights' type, because the f32 kernels are bound by their arithmetic there (Q4_K read at
// 60-70 % of memory's pace with VNNI's, 40 % with AVX2's, against 92-100 % and 77 % in
// integers); or kept in f32 (PRISM_CPU_QUANT_ACTIVATIONS=f32),
// whose results are the float product of the dequantized weights, as the float reference's.
//
// Weights the executable keeps interleaved (Q4_0, Q8_0 and the K-quants on CPUs with AVX-512
// VNNI and no AMX, Q4_0 on CPUs with AVX2 but not VNNI: weight_layout.h) take the row kernels for
// any number of rows (quant_rows_int8_interleaved), a prefill's too: their integer products run at
// several times the speed of the others.
//
// Products of the same activations by several such weights (a layer's q, k and v) run as one
// step (QuantDotProducts): one rounding of the activations, one parallel loop over all their rows.
//
// Any other dequantize is materialized by its own kernel, row by row.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string_view>
#include <type_traits>
#include <vector>

#include "prism/backends/cpu/aligned.h"
#include "prism/backends/cpu/amx_gemm.h"
#include "prism/backends/cpu/bf16_products.h"
#include "prism/backends/cpu/gemm.h"
#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/nn_rows.h"
#include "prism/backends/cpu/quant_rows.h"
#include "prism/backends/cpu/storage.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/compiler/fusion.h"
#include "prism/core/error.h"

namespace prism::cpu {
namespace {

using ir::Op;

constexpr int64_t kQuantRows = 16;  // activation rows the row kernels take
// Weight rows dequantized at a time for larger products. The float product splits a panel
// among the threads in slices of 512 columns or more (kernels_dot.cpp), and a panel should
// stay in cache while the product reads it: a 512-token prefill of a Llama-1B-shaped Q4_K_M
// file took 1.55 s with panels of 1024 rows, 2.35 s with 512, 2.8 s with 256 (one slice: one
// thread), 2.0 s with 4096 (Intel Xeon, 2 cores). Copying the panels into the blocked layout
// bf16 products read fastest (weight_layout.h) cost more than it saved (3.4 s with 2048).
// Laying out the activations for gemm.h once a product rather than once a panel (QuantDot::
// panels) took a 512-token prefill of the Q8_0 file from 82.8 to 86.9 tokens a second (AMD
// EPYC, Zen 2, 2 cores; median of 3 alternating runs).
constexpr int64_t kPanelRows = 1024;
// Where a prompt's bf16 products run on prism's AMX tiles (amx_gemm.h), each thread
// dequantizes blocks of 64 weight rows straight into the tiles' layout, a piece of
// kTilePieceValues values of the 64 rows at a time (32 KiB, in L1), and multiplies up to
// kTileBlocksBytes of them (in L2, beside the activations amx_gemm_blocked keeps there) by all
// the rows.
constexpr int64_t kTilePieceValues = 256;
constexpr int64_t kTileBlocksBytes = 1 << 20;

}  // namespace

bool int8_activations(quant::GgmlType type) {
  const char* env = std::getenv("PRISM_CPU_QUANT_ACTIVATIONS");
  const std::string_view mode = env ? env : "int8";
  PRISM_CHECK(mode == "int8" || mode == "f32",
              "cpu: PRISM_CPU_QUANT_ACTIVATIONS must be int8 or f32, not '{}'", mode);
  return mode == "int8" && quant_rows_int8_native(type);
}

namespace {

Kernel dequantize_kernel(const ir::Graph& g, const ir::Node& n) {
  const quant::GgmlType format = n.attr<ir::DequantizeAttrs>().format;
  const Shape& in = g.node(n.inputs[0]).shape;
  const int64_t row_bytes = in.size(in.rank() - 1);
  const int64_t values = n.shape.size(n.shape.rank() - 1);
  const int64_t rows = values == 0 ? 0 : n.shape.numel() / values;
  const DType out_dtype = n.shape.dtype();
  // f32 and bf16 in one pass (quant_rows.h); other floats through f32.
  const bool direct = out_dtype == DType::f32 || out_dtype == DType::bf16;
  const int64_t oe = static_cast<int64_t>(size_of(out_dtype));
  return [=](std::span<const std::byte* const> args, std::byte* out, ThreadPool& pool) {
    const NnRowKernels convert = nn_row_kernels();
    pool.parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
      if (direct) {
        dequantize_rows(format, args[0] + r0 * row_bytes, row_bytes, r1 - r0, values, out_dtype,
                        out + r0 * values * oe, values);
        return;
      }
      std::vector<float> row(values);
      for (int64_t r = r0; r < r1; ++r) {
        dequantize_rows(format, args[0] + r * row_bytes, row_bytes, 1, values, DType::f32,
                        reinterpret_cast<std::byte*>(row.data()), values);
        convert.from_f32(out_dtype, row.data(), out + r * values * oe, values);
      }
    });
  };
}

// x {..., k} . dequantize(w {n, bytes}) contracting k: out {..., n}. What each product of a
// QuantDotProducts step knows of itself: its sizes, and how it multiplies rows of its weights.
class QuantDot {
 public:
  QuantDot(const ir::Graph& g, const ir::Node& n) {
    const ir::Node& dq = g.node(n.inputs[1]);
    format_ = dq.attr<ir::DequantizeAttrs>().format;
    const Shape& x = g.node(n.inputs[0]).shape;
    x_dtype_ = x.dtype();
    out_dtype_ = n.shape.dtype();
    n_ = dq.shape.size(0);
    k_ = dq.shape.size(1);
    row_bytes_ = g.node(dq.inputs[0]).shape.size(1);
    m_ = k_ == 0 ? 0 : x.numel() / k_;
    int8_ = int8_activations(format_);
    many_rows_ = int8_ && quant_rows_int8_takes_many_rows(format_);
    // (Panels even where few_rows(): a group runs them for all its products when one needs them.)
    if (m_ <= kQuantRows || n_ == 0) return;
    // A prompt's bf16 products may run on prism's AMX tiles (tiled()), the weights dequantized
    // into blocks of 64 rows.
    const int64_t bv = quant::info(format_).block_elements;
    tiles_ = x_dtype_ == DType::bf16 && out_dtype_ == DType::bf16 && n_ % kWeightBlockRows == 0 &&
             k_ % kWeightBlockDepth == 0 && piece_values() % bv == 0 && amx_gemm_available();
    // Larger products: a float product of the activations by a panel of dequantized rows,
    // for whole panels and for the last one.
    panel_ = std::min(kPanelRows, n_);
    full_panel_ = panel_product(panel_);
    if (n_ % panel_) last_panel_ = panel_product(n_ % panel_);
  }

  // Whether the row kernels take the product: up to kQuantRows rows, or any number where the
  // integer kernels multiply many at the speed of a few (quant_rows_int8_takes_many_rows).
  bool few_rows() const { return m_ <= kQuantRows || many_rows_; }
  int64_t m() const { return m_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  DType x_dtype() const { return x_dtype_; }
  DType out_dtype() const { return out_dtype_; }
  quant::GgmlType format() const { return format_; }
  bool int8() const { return int8_; }

  // Up to kQuantRows rows (or any number, as few_rows() says): weight rows [n0, n1) of w times
  // x (xf: f32 rows, k_ apart; rounded: them rounded for format_, where int8_) into y (the
  // result of weight row n0 for the first activation row; rows ldy apart), by the row kernels.
  void range(const float* xf, const QuantizedRows& rounded, const std::byte* w, bool interleaved,
             int64_t n0, int64_t n1, float* y, int64_t ldy) const {
    if (interleaved) {
      quant_rows_int8_interleaved(format_, rounded, w, row_bytes_, n0, n1, k_, y, ldy);
    } else if (int8_) {
      quant_rows_int8(format_, rounded, w + n0 * row_bytes_, row_bytes_, n1 - n0, k_, y, ldy);
    } else {
      quant_rows(format_, xf, k_, m_, w + n0 * row_bytes_, row_bytes_, n1 - n0, k_, y, ldy);
    }
  }

  // Whether a prompt's product runs on prism's AMX tiles: where it can (bf16 activations and
  // results, whole blocks of 64 rows) and the tiles were measured faster than oneDNN for bf16
  // weights (bf16_tile_products: the same products, the dequantization aside).
  bool tiled() const { return tiles_ && bf16_tile_products().tiles; }
  // The blocks of 64 weight rows dequantized and multiplied at a time (tiled_blocks).
  int64_t tile_unit() const {
    return std::clamp<int64_t>(kTileBlocksBytes / (kWeightBlockRows * k_ * 2), 1, 4);
  }

  // Blocks [b0, b1) of 64 weight rows of w times the activations xt (tile_activations) into
  // their columns of out, on the calling thread: tile_unit() blocks at a time dequantized into
  // the tiles' layout, then multiplied by all the rows.
  void tiled_blocks(const uint16_t* xt, const std::byte* w, int64_t b0, int64_t b1,
                    std::byte* out) const {
    thread_local AlignedBuffer<uint16_t> blocks, piece;
    const int64_t pv = piece_values(), unit = tile_unit(), block_values = kWeightBlockRows * k_;
    uint16_t* blocked = blocks.reserve(unit * block_values);
    uint16_t* rows = piece.reserve(kWeightBlockRows * pv);
    const quant::GgmlTypeInfo& t = quant::info(format_);
    for (int64_t u0 = b0; u0 < b1; u0 += unit) {
      const int64_t u1 = std::min(b1, u0 + unit);
      for (int64_t b = u0; b < u1; ++b) {
        const std::byte* wb = w + b * kWeightBlockRows * row_bytes_;
        for (int64_t c = 0; c < k_; c += pv) {
          dequantize_rows(format_, wb + c / t.block_elements * t.block_bytes, row_bytes_,
                          kWeightBlockRows, pv, DType::bf16, reinterpret_cast<std::byte*>(rows),
                          pv);
          block_rows_for_amx_gemm(rows, pv, c, c + pv, blocked + (b - u0) * block_values);
        }
      }
      amx_gemm_blocked(xt, m_, k_, blocked, u1 - u0,
                       reinterpret_cast<uint16_t*>(out) + u0 * kWeightBlockRows, n_);
    }
  }

  // More rows: panel by panel, dequantized (in parallel), multiplied, and copied into the
  // panel's columns of the output. Where the float product is bf16 on f32 FMAs
  // (widens_bf16_product: gemm.h's products, as kernels_dot.cpp runs them), the activations are
  // laid out for them once for all the panels rather than once a panel, and each panel's products
  // go straight into its columns of the output: the same bits.
  void panels(const std::byte* x, const std::byte* w, std::byte* out, ThreadPool& pool) const {
    const int64_t xe = static_cast<int64_t>(size_of(x_dtype_));
    const int64_t oe = static_cast<int64_t>(size_of(out_dtype_));
    const bool widened = widens_bf16_product(x_dtype_, out_dtype_);
    std::vector<std::byte> weights(panel_ * k_ * xe), product(widened ? 0 : m_ * panel_ * oe);
    const float* packed =
        widened ? widened_activations(reinterpret_cast<const uint16_t*>(x), k_, 1, m_, k_, pool)
                : nullptr;
    for (int64_t p0 = 0; p0 < n_; p0 += panel_) {
      const int64_t rows = std::min(panel_, n_ - p0);
      pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
        dequantize_rows(format_, w + (p0 + r0) * row_bytes_, row_bytes_, r1 - r0, k_, x_dtype_,
                        weights.data() + r0 * k_ * xe, k_);
      });
      if (widened) {
        const auto* panel = reinterpret_cast<const uint16_t*>(weights.data());
        pool.parallel_for((rows + kGemmColumns - 1) / kGemmColumns, 1, [&](int64_t c0, int64_t c1) {
          gemm_columns(packed, m_, k_, GemmWeights{panel, 1, k_}, c0 * kGemmColumns,
                       std::min(rows, c1 * kGemmColumns), {out + p0 * oe, n_, true});
        });
        continue;
      }
      const Panel& panel = rows == panel_ ? full_panel_ : last_panel_;
      const std::byte* args[] = {x, weights.data()};
      panel.product(args, product.data(), pool);
      pool.parallel_for(m_, 16, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          std::copy_n(product.data() + i * rows * oe, rows * oe, out + (i * n_ + p0) * oe);
        }
      });
    }
  }

 private:
  struct Panel {
    std::shared_ptr<ir::Graph> graph;  // x {m, k} . w {rows, k}: what `product` was made for
    Kernel product;
  };

  Panel panel_product(int64_t rows) const {
    auto g = std::make_shared<ir::Graph>();
    const DType t = x_dtype_;
    const ir::ValueId x =
        g->add(ir::Node{Op::input, Shape(t, {{"m", m_}, {"k", k_}}), {}, ir::InputAttrs{0}});
    const ir::ValueId w =
        g->add(ir::Node{Op::input, Shape(t, {{"n", rows}, {"k", k_}}), {}, ir::InputAttrs{1}});
    const ir::ValueId dot = g->add(ir::Node{Op::dot,
                                            Shape(out_dtype_, {{"m", m_}, {"n", rows}}),
                                            {x, w},
                                            ir::DotAttrs{{}, {}, {1}, {1}}});
    g->outputs().push_back(dot);
    return {g, make_dot_kernel(*g, dot)};
  }

  // The values of k dequantized at a time for tiled_blocks.
  int64_t piece_values() const { return k_ % kTilePieceValues == 0 ? kTilePieceValues : 32; }

  quant::GgmlType format_;
  DType x_dtype_, out_dtype_;
  int64_t m_ = 0, n_ = 0, k_ = 0, row_bytes_ = 0, panel_ = 0;
  bool int8_ = false, many_rows_ = false, tiles_ = false;
  Panel full_panel_, last_panel_;
};

// Products of the same activations by one or several quantized weights (a layer's q, k and v;
// its gate and up) as one step: where every product takes the row kernels (QuantDot::few_rows)
// the activations are widened and rounded once for all (once per weights' format), and one
// parallel loop runs over all the products' rows, each thread on its own weight rows, so the
// threads start and meet once instead of once a product. A product's rows are computed the
// same way alone or in a group: the same bits. Otherwise each product runs in turn
// (QuantDot::panels).
class QuantDotProducts {
 public:
  explicit QuantDotProducts(std::vector<QuantDot> members) : members_(std::move(members)) {
    for (const QuantDot& m : members_) {
      if (m.int8() && std::find(formats_.begin(), formats_.end(), m.format()) == formats_.end())
        formats_.push_back(m.format());
    }
  }

  // in: the activations, then each product's weights; outs: each product's output.
  void operator()(std::span<const std::byte* const> in, std::span<std::byte* const> outs,
                  ThreadPool& pool) const {
    const QuantDot& lead = members_.front();
    if (lead.m() == 0) return;
    // Weights the executable keeps interleaved (weight_layout.h; it says so on this thread):
    // the row kernels take any number of rows of them.
    std::vector<bool> interleaved(members_.size());
    for (size_t i = 0; i < members_.size(); ++i)
      interleaved[i] = interleaved_format(layout_of(in[1 + i])).has_value();
    // The products the row kernels take, one after another in the parallel loop's range; the
    // others run on panels first. The loop runs over units of 16 rows where every product's
    // rows come in those, so that no group of interleaved rows is split between threads.
    std::vector<size_t> rows, tiled;
    std::vector<int64_t> first{0};
    int64_t unit = kQuantGroupRows;
    for (size_t i = 0; i < members_.size(); ++i) {
      if (members_[i].few_rows() || interleaved[i]) {
        rows.push_back(i);
        first.push_back(first.back() + members_[i].n());
        if (members_[i].n() % kQuantGroupRows) unit = 1;
      } else if (members_[i].n() > 0 && members_[i].tiled()) {
        tiled.push_back(i);
      } else if (members_[i].n() > 0) {
        members_[i].panels(in[0], in[1 + i], outs[i], pool);
      }
    }
    if (!tiled.empty()) run_tiled(tiled, in, outs, pool);
    if (first.back() == 0) return;
    const int64_t m = lead.m(), k = lead.k();
    const NnRowKernels convert = nn_row_kernels();
    // The step's buffers are the calling thread's, kept from call to call: an executable runs
    // its steps one at a time, and fresh ones of a prefill's size cost more in page faults and
    // zeroing than the conversions they hold.
    thread_local std::vector<float> x_f32;
    thread_local std::map<quant::GgmlType, QuantizedRows> rounded_here;
    auto& rounded_for = rounded_here;  // this thread's, for the lambdas on the pool's threads
    const float* xf = reinterpret_cast<const float*>(in[0]);
    if (lead.x_dtype() != DType::f32) {
      if (x_f32.size() < static_cast<size_t>(m * k)) x_f32.resize(m * k);
      float* widened = x_f32.data();  // (the lambdas below run on other threads too)
      pool.parallel_for(m, 16, [&](int64_t i0, int64_t i1) {
        convert.to_f32(lead.x_dtype(), in[0] + i0 * k * size_of(lead.x_dtype()), widened + i0 * k,
                       (i1 - i0) * k);
      });
      xf = widened;
    }
    for (quant::GgmlType format : formats_) {
      if (std::any_of(rows.begin(), rows.end(), [&](size_t i) {
            return members_[i].int8() && members_[i].format() == format;
          }))
        quantize_activations(format, xf, k, m, k, rounded_for[format], &pool);
    }
    static const QuantizedRows kNone;
    // (Chunks that shrink: the products stream their weights from memory.)
    pool.parallel_for_tapered(first.back() / unit, 16 / unit, [&](int64_t u0, int64_t u1) {
      const int64_t a0 = u0 * unit, a1 = u1 * unit;
      for (size_t j = 0; j < rows.size(); ++j) {
        const int64_t lo = std::max(a0, first[j]) - first[j];
        const int64_t hi = std::min(a1, first[j + 1]) - first[j];
        if (lo >= hi) continue;
        const size_t i = rows[j];
        const QuantDot& member = members_[i];
        const QuantizedRows& rounded = member.int8() ? rounded_for.at(member.format()) : kNone;
        const int64_t n = member.n();
        const bool groups = interleaved[i];
        if (member.out_dtype() == DType::f32) {
          member.range(xf, rounded, in[1 + i], groups, lo, hi,
                       reinterpret_cast<float*>(outs[i]) + lo, n);
          continue;
        }
        // Other dtypes: the results of a few columns at a time in a cache-sized tile of f32,
        // rounded into the output by the thread that computed them; whole groups of 16 rows
        // at a time where they can be.
        thread_local std::vector<float> tile;
        const int64_t cols = std::min(
            hi - lo,
            std::max(kQuantGroupRows, kTileFloats / m / kQuantGroupRows * kQuantGroupRows));
        if (tile.size() < static_cast<size_t>(m * cols)) tile.resize(m * cols);
        const int64_t oe = static_cast<int64_t>(size_of(member.out_dtype()));
        for (int64_t c0 = lo, c1; c0 < hi; c0 = c1) {
          c1 = std::min(hi, (c0 + cols) / kQuantGroupRows * kQuantGroupRows);
          if (c1 <= c0) c1 = std::min(hi, c0 + cols);
          member.range(xf, rounded, in[1 + i], groups, c0, c1, tile.data(), c1 - c0);
          for (int64_t r = 0; r < m; ++r) {
            convert.from_f32(member.out_dtype(), tile.data() + r * (c1 - c0),
                             outs[i] + (r * n + c0) * oe, c1 - c0);
          }
        }
      }
    });
  }

 private:
  // The products that run on prism's AMX tiles (QuantDot::tiled), as one parallel loop over
  // all their units of blocks: the activations laid out for the tiles once for all of them.
  void run_tiled(const std::vector<size_t>& tiled, std::span<const std::byte* const> in,
                 std::span<std::byte* const> outs, ThreadPool& pool) const {
    const QuantDot& lead = members_[tiled.front()];
    const uint16_t* xt = tile_activations(reinterpret_cast<const uint16_t*>(in[0]), lead.k(),
                                          lead.m(), lead.k(), pool);
    const int64_t unit = lead.tile_unit();  // the same k: the same for all
    std::vector<int64_t> first{0};          // each product's first unit
    for (size_t i : tiled) {
      const int64_t blocks = members_[i].n() / kWeightBlockRows;
      first.push_back(first.back() + (blocks + unit - 1) / unit);
    }
    pool.parallel_for_each(first.back(), [&](int64_t u0, int64_t u1) {
      for (size_t j = 0; j < tiled.size(); ++j) {
        const int64_t lo = std::max(u0, first[j]) - first[j];
        const int64_t hi = std::min(u1, first[j + 1]) - first[j];
        if (lo >= hi) continue;
        const QuantDot& member = members_[tiled[j]];
        member.tiled_blocks(xt, in[1 + tiled[j]], lo * unit,
                            std::min(member.n() / kWeightBlockRows, hi * unit), outs[tiled[j]]);
      }
    });
  }

  // f32 results a thread holds before rounding them into a bf16 or f16 output: 256 KiB.
  static constexpr int64_t kTileFloats = 64 * 1024;

  std::vector<QuantDot> members_;
  std::vector<quant::GgmlType> formats_;  // the formats the activations are rounded for
};

}  // namespace

std::vector<bool> folded_dequantizes(const ir::Graph& g) {
  // Products QuantDotProducts computes from the blocks: f32 or bf16 activations and results.
  return compiler::folded_dequantizes(g, [&](const ir::Node& dot) {
    const DType x = g.node(dot.inputs[0]).shape.dtype(), y = dot.shape.dtype();
    return (x == DType::f32 || x == DType::bf16) && (y == DType::f32 || y == DType::bf16);
  });
}

Kernel make_quant_kernel(const ir::Graph& g, ir::ValueId id) {
  const ir::Node& n = g.node(id);
  return n.op == Op::dequantize ? dequantize_kernel(g, n) : nullptr;
}

GroupKernel make_quant_dot_group_kernel(const ir::Graph& g, std::span<const ir::ValueId> ids) {
  std::vector<QuantDot> members;
  for (ir::ValueId id : ids) {
    const ir::Node& n = g.node(id);
    if (n.op != Op::dot || g.node(n.inputs[1]).op != Op::dequantize) return nullptr;
    if (n.inputs[0] != g.node(ids[0]).inputs[0]) return nullptr;
    const QuantDot& member = members.emplace_back(g, n);
    const QuantDot& first = members.front();
    if (member.m() != first.m() || member.k() != first.k() || member.x_dtype() != first.x_dtype()) {
      return nullptr;
    }
  }
  if (members.size() < 2) return nullptr;
  auto group = std::make_shared<QuantDotProducts>(std::move(members));
  return [group](std::span<const std::byte* const> in, std::span<std::byte* const> outs,
                 ThreadPool& pool) { (*group)(in, outs, pool); };
}

Kernel make_quant_dot_kernel(const ir::Graph& g, ir::ValueId id) {
  std::vector<QuantDot> one;
  one.emplace_back(g, g.node(id));
  auto kernel = std::make_shared<QuantDotProducts>(std::move(one));
  return [kernel](std::span<const std::byte* const> in, std::byte* out, ThreadPool& pool) {
    std::byte* const outs[] = {out};
    (*kernel)(in, outs, pool);
  };
}

}  // namespace prism::cpu
