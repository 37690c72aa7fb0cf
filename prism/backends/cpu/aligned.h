// A buffer of trivially copyable values at a 64-byte boundary (a cache line), grown on demand
// and never shrunk: what AMX tile loads want (a tile row that straddles two cache lines costs
// twice the reads) and what a thread's scratch reused from call to call needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>

namespace prism::cpu {

template <typename T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  static constexpr std::align_val_t kAlignment{64};

  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t n) { reserve(n); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { ::operator delete[](data_, kAlignment); }

  // Room for n values (their contents unspecified after growing), at data().
  T* reserve(int64_t n) {
    if (n > size_) {
      ::operator delete[](data_, kAlignment);
      data_ = nullptr;
      data_ = static_cast<T*>(::operator new[](static_cast<size_t>(n) * sizeof(T), kAlignment));
      size_ = n;
    }
    return data_;
  }
  T* data() const { return data_; }

 private:
  T* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace prism::cpu
