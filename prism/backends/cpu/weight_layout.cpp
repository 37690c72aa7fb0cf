#include "prism/backends/cpu/weight_layout.h"

#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>
#include <vector>

#include "prism/backends/cpu/simd.h"

namespace prism::cpu {
namespace {

struct Registry {
  std::mutex changes;  // held through a check and the rewrite it calls for
  std::shared_mutex mutex;
  std::unordered_set<const std::byte*> blocked;
};

Registry& registry() {
  static Registry r;
  return r;
}

void mark(const std::byte* data, bool is_blocked) {
  Registry& r = registry();
  std::unique_lock lock(r.mutex);
  if (is_blocked) {
    r.blocked.insert(data);
  } else {
    r.blocked.erase(data);
  }
}

// Rewrites each 64-row block through a copy of it: row j's values k, k + 1 go to
// [k / 2][j][0..1] (to_blocked), or back.
void rewrite(std::byte* data, int64_t n, int64_t k, ThreadPool& pool, bool to_blocked) {
  const int64_t rows = kWeightBlockRows, block = rows * k;
  pool.parallel_for(n / rows, 1, [&](int64_t b0, int64_t b1) {
    std::vector<uint16_t> copy(block);
    for (int64_t b = b0; b < b1; ++b) {
      uint16_t* p = reinterpret_cast<uint16_t*>(data) + b * block;
      std::memcpy(copy.data(), p, block * sizeof(uint16_t));
      for (int64_t j = 0; j < rows; ++j) {
        for (int64_t i = 0; i < k; ++i) {
          const int64_t at = ((i / 2) * rows + j) * 2 + i % 2;
          if (to_blocked) {
            p[at] = copy[j * k + i];
          } else {
            p[j * k + i] = copy[at];
          }
        }
      }
    }
  });
}

}  // namespace

bool blockable(const Shape& shape) {
  return shape.dtype() == DType::bf16 && shape.rank() == 2 && shape.size(0) > 0 &&
         shape.size(0) % kWeightBlockRows == 0 && shape.size(1) > 0 &&
         shape.size(1) % kWeightBlockDepth == 0 && simd::current().avx512_bf16;
}

void set_weights_blocked(std::byte* data, int64_t n, int64_t k, bool blocked, ThreadPool& pool) {
  std::lock_guard lock(registry().changes);
  if (cpu::blocked(data) == blocked) return;
  rewrite(data, n, k, pool, blocked);
  mark(data, blocked);
}

bool blocked(const std::byte* data) {
  Registry& r = registry();
  std::shared_lock lock(r.mutex);
  return !r.blocked.empty() && r.blocked.count(data) > 0;
}

void forget_blocked(const std::byte* data) { mark(data, false); }

}  // namespace prism::cpu
