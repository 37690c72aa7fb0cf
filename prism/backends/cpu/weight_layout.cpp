#include "prism/backends/cpu/weight_layout.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "prism/backends/cpu/simd.h"

namespace prism::cpu {
namespace {

thread_local const BlockedWeights* current = nullptr;

}  // namespace

bool blockable(const Shape& shape) {
  return shape.dtype() == DType::bf16 && shape.rank() == 2 && shape.size(0) > 0 &&
         shape.size(0) % kWeightBlockRows == 0 && shape.size(1) > 0 &&
         shape.size(1) % kWeightBlockDepth == 0 && simd::current().avx512_bf16;
}

void copy_weights(const std::byte* from, std::byte* to, int64_t n, int64_t k, bool to_blocked,
                  ThreadPool& pool) {
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

BlockedWeights::BlockedWeights(std::span<const std::byte* const> data)
    : data_(data), outer_(current) {
  current = this;
}

BlockedWeights::~BlockedWeights() { current = outer_; }

bool blocked(const std::byte* data) {
  for (const BlockedWeights* scope = current; scope; scope = scope->outer_) {
    if (std::find(scope->data_.begin(), scope->data_.end(), data) != scope->data_.end()) {
      return true;
    }
  }
  return false;
}

}  // namespace prism::cpu
