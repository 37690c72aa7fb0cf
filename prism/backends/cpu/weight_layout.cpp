#include "prism/backends/cpu/weight_layout.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "prism/backends/cpu/quant_rows.h"
#include "prism/backends/cpu/simd.h"
#include "prism/core/error.h"

namespace prism::cpu {
namespace {

thread_local const BlockedWeights* current = nullptr;

}  // namespace

bool blockable(const Shape& shape) {
  return shape.dtype() == DType::bf16 && shape.rank() == 2 && shape.size(0) > 0 &&
         shape.size(0) % kWeightBlockRows == 0 && shape.size(1) > 0 &&
         shape.size(1) % kWeightBlockDepth == 0 && simd::current().avx512_bf16;
}

std::optional<WeightLayout> interleaved_layout(quant::GgmlType format) {
  switch (format) {
    case quant::GgmlType::Q4_0:
      return WeightLayout::q4_0_rows;
    case quant::GgmlType::Q8_0:
      return WeightLayout::q8_0_rows;
    case quant::GgmlType::Q4_K:
      return WeightLayout::q4_k_rows;
    case quant::GgmlType::Q5_K:
      return WeightLayout::q5_k_rows;
    case quant::GgmlType::Q6_K:
      return WeightLayout::q6_k_rows;
    default:
      return std::nullopt;
  }
}

std::optional<quant::GgmlType> interleaved_format(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::q4_0_rows:
      return quant::GgmlType::Q4_0;
    case WeightLayout::q8_0_rows:
      return quant::GgmlType::Q8_0;
    case WeightLayout::q4_k_rows:
      return quant::GgmlType::Q4_K;
    case WeightLayout::q5_k_rows:
      return quant::GgmlType::Q5_K;
    case WeightLayout::q6_k_rows:
      return quant::GgmlType::Q6_K;
    default:
      return std::nullopt;
  }
}

bool interleaving_on() {
  const char* env = std::getenv("PRISM_CPU_QUANT_LAYOUT");
  const std::string_view want = env && *env ? env : "interleaved";
  PRISM_CHECK(want == "interleaved" || want == "stored",
              "cpu: PRISM_CPU_QUANT_LAYOUT must be interleaved or stored, not '{}'", want);
  return want == "interleaved";
}

bool interleaves(quant::GgmlType format) {
  return interleaving_on() && interleaved_layout(format) &&
         quant_rows_int8_interleaved_native(format);
}

bool interleavable(quant::GgmlType format, const Shape& shape) {
  if (!interleaves(format) || shape.dtype() != DType::u8 || shape.rank() != 2) return false;
  const int64_t block_bytes = quant::info(format).block_bytes;
  return shape.size(0) > 0 && shape.size(0) % kQuantGroupRows == 0 && shape.size(1) > 0 &&
         shape.size(1) % block_bytes == 0;
}

namespace {

// Rows [16 g, 16 g + 16) of u8 weights {n, row_bytes} in `format` interleaved (or back), a
// group a task through a copy of the group.
void copy_quant_weights(quant::GgmlType format, const std::byte* from, std::byte* to, int64_t n,
                        int64_t row_bytes, bool to_layout, ThreadPool& pool) {
  const int64_t block_bytes = quant::info(format).block_bytes;
  const int64_t group = kQuantGroupRows * row_bytes;
  pool.parallel_for(n / kQuantGroupRows, 1, [&](int64_t g0, int64_t g1) {
    std::vector<std::byte> copy(group);
    for (int64_t g = g0; g < g1; ++g) {
      std::memcpy(copy.data(), from + g * group, group);
      std::byte* d = to + g * group;
      for (int64_t r = 0; r < kQuantGroupRows; ++r) {
        if (!to_layout) {
          interleaved_row(copy.data(), r, row_bytes, format, d + r * row_bytes);
          continue;
        }
        const int64_t blocks = row_bytes / block_bytes;
        for (int64_t b = 0; b < blocks; ++b) {
          const std::byte* row = copy.data() + r * row_bytes + b * block_bytes;
          for_each_chunk(format, b, blocks, [&](int64_t from, int64_t bytes, int64_t at) {
            std::memcpy(d + at + r * bytes, row + from, bytes);
          });
        }
      }
    }
  });
}

}  // namespace

void copy_weights(WeightLayout layout, const std::byte* from, std::byte* to, int64_t n, int64_t k,
                  bool to_blocked, ThreadPool& pool) {
  if (std::optional<quant::GgmlType> format = interleaved_format(layout)) {
    copy_quant_weights(*format, from, to, n, k, to_blocked, pool);
    return;
  }
  PRISM_CHECK(layout == WeightLayout::bf16_blocks, "cpu: no copy into weight layout {}",
              static_cast<int>(layout));
  // Row j's values i, i + 1 of a block go to [i / 2][j][0..1], one block a task, through a
  // copy of the block (so `to` may be `from`: in place).
  const int64_t rows = kWeightBlockRows, block = rows * k;
  const auto* src = reinterpret_cast<const uint16_t*>(from);
  auto* dst = reinterpret_cast<uint16_t*>(to);
  pool.parallel_for(n / rows, 1, [&](int64_t b0, int64_t b1) {
    std::vector<uint16_t> copy(block);
    const uint16_t* s = copy.data();
    for (int64_t b = b0; b < b1; ++b) {
      std::memcpy(copy.data(), src + b * block, block * sizeof(uint16_t));
      uint16_t* d = dst + b * block;
      for (int64_t j = 0; j < rows; ++j) {
        for (int64_t i = 0; i < k; ++i) {
          const int64_t at = blocked_index(j, i, k);
          if (to_blocked) {
            d[at] = s[j * k + i];
          } else {
            d[j * k + i] = s[at];
          }
        }
      }
    }
  });
}

BlockedWeights::BlockedWeights(std::span<const std::byte* const> data,
                               std::span<const WeightLayout> layouts)
    : data_(data), layouts_(layouts), outer_(current) {
  current = this;
}

BlockedWeights::~BlockedWeights() { current = outer_; }

WeightLayout layout_of(const std::byte* data) {
  for (const BlockedWeights* scope = current; scope; scope = scope->outer_) {
    const auto it = std::find(scope->data_.begin(), scope->data_.end(), data);
    if (it != scope->data_.end()) return scope->layouts_[it - scope->data_.begin()];
  }
  return WeightLayout::stored;
}

}  // namespace prism::cpu
