#include "prism/core/host_buffer.h"

#include <cmath>
#include <cstdlib>

namespace prism {
namespace {

std::shared_ptr<std::byte> allocate(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(64, rounded));
  if (!p) fail("HostBuffer: out of memory allocating {} bytes", bytes);
  std::memset(p, 0, rounded);
  return std::shared_ptr<std::byte>(p, [](std::byte* q) { std::free(q); });
}

double load(DType t, const std::byte* p) {
  switch (t) {
    case DType::f64:
      return *reinterpret_cast<const double*>(p);
    case DType::f32:
      return *reinterpret_cast<const float*>(p);
    case DType::f16:
      return f16_to_f32(*reinterpret_cast<const uint16_t*>(p));
    case DType::bf16:
      return bf16_to_f32(*reinterpret_cast<const uint16_t*>(p));
    case DType::i64:
      return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case DType::i32:
      return *reinterpret_cast<const int32_t*>(p);
    case DType::i16:
      return *reinterpret_cast<const int16_t*>(p);
    case DType::i8:
      return *reinterpret_cast<const int8_t*>(p);
    case DType::u8:
      return *reinterpret_cast<const uint8_t*>(p);
    case DType::u32:
      return *reinterpret_cast<const uint32_t*>(p);
    case DType::boolean:
      return *reinterpret_cast<const uint8_t*>(p) != 0;
  }
  return 0;
}

void store(DType t, std::byte* p, double v) {
  switch (t) {
    case DType::f64:
      *reinterpret_cast<double*>(p) = v;
      break;
    case DType::f32:
      *reinterpret_cast<float*>(p) = static_cast<float>(v);
      break;
    case DType::f16:
      *reinterpret_cast<uint16_t*>(p) = f32_to_f16(static_cast<float>(v));
      break;
    case DType::bf16:
      *reinterpret_cast<uint16_t*>(p) = f32_to_bf16(static_cast<float>(v));
      break;
    case DType::i64:
      *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(v);
      break;
    case DType::i32:
      *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v);
      break;
    case DType::i16:
      *reinterpret_cast<int16_t*>(p) = static_cast<int16_t>(v);
      break;
    case DType::i8:
      *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v);
      break;
    case DType::u8:
      *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(v);
      break;
    case DType::u32:
      *reinterpret_cast<uint32_t*>(p) = static_cast<uint32_t>(v);
      break;
    case DType::boolean:
      *reinterpret_cast<uint8_t*>(p) = v != 0;
      break;
  }
}

}  // namespace

HostBuffer::HostBuffer(Shape shape) : shape_(shape), data_(allocate(shape.bytes())) {}

HostBuffer::HostBuffer(Shape shape, std::span<const std::byte> bytes)
    : shape_(shape), data_(allocate(shape.bytes())) {
  PRISM_CHECK(static_cast<int64_t>(bytes.size()) == shape.bytes(),
              "HostBuffer: {} bytes given for {} which needs {}", bytes.size(), shape.str(),
              shape.bytes());
  if (!bytes.empty()) std::memcpy(data_.get(), bytes.data(), bytes.size());
}

void HostBuffer::check_type(DType t) const {
  PRISM_CHECK(t == dtype() || (t == DType::u8 && dtype() == DType::boolean),
              "HostBuffer: viewed as {} but holds {}", name(t), shape_.str());
}

std::vector<double> HostBuffer::to_f64() const {
  std::vector<double> out(numel());
  int s = size_of(dtype());
  for (int64_t i = 0; i < numel(); ++i) out[i] = load(dtype(), data_.get() + i * s);
  return out;
}

HostBuffer HostBuffer::convert(DType t) const {
  HostBuffer out(shape_.with_dtype(t));
  // The conversions weights take on load, without the double round trip.
  const auto* u16 = reinterpret_cast<const uint16_t*>(data());
  auto* f32 = reinterpret_cast<float*>(out.data());
  if (t == DType::f32 && dtype() == DType::bf16) {
    for (int64_t i = 0; i < numel(); ++i) f32[i] = bf16_to_f32(u16[i]);
    return out;
  }
  if (t == DType::f32 && dtype() == DType::f16) {
    for (int64_t i = 0; i < numel(); ++i) f32[i] = f16_to_f32(u16[i]);
    return out;
  }
  if (t == DType::bf16 && dtype() == DType::f32) {
    const auto* src = reinterpret_cast<const float*>(data());
    auto* dst = reinterpret_cast<uint16_t*>(out.data());
    for (int64_t i = 0; i < numel(); ++i) dst[i] = f32_to_bf16(src[i]);
    return out;
  }
  int s = size_of(dtype()), d = size_of(t);
  for (int64_t i = 0; i < numel(); ++i) store(t, out.data() + i * d, load(dtype(), data() + i * s));
  return out;
}

HostBuffer HostBuffer::reshaped(const Shape& shape) const {
  PRISM_CHECK(shape.numel() == numel(), "HostBuffer: cannot reshape {} to {}", shape_.str(),
              shape.str());
  HostBuffer out = *this;
  out.shape_ = shape.with_dtype(dtype());
  return out;
}

}  // namespace prism
