#include "prism/quant/dequantize.h"

#include <bit>
#include <cstring>

#include "prism/core/dtype.h"
#include "prism/core/error.h"

namespace prism::quant {
namespace {

static_assert(std::endian::native == std::endian::little,
              "ggml blocks are little-endian; loads below would need byte swaps");

// Block fields are not aligned within a block (a Q4_0 block is 18 bytes), so every load is
// a memcpy, which compiles to a plain unaligned load.
float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Q4_0: d (f16), then 16 bytes of 4-bit values; element j < 16 is byte j's low nibble,
// element 16 + j its high nibble. Values are q - 8.
void q4_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0x0f) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

// Q4_1: d and m (f16), then Q4_0's nibbles, unsigned: d * q + m.
void q4_1(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 0x0f) + m;
    y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

// Q5_0: d (f16), a 32-bit word whose bit j is element j's fifth bit, then Q4_0's nibbles for
// the low four bits. Values are q - 16.
void q5_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint32_t qh = load_u32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    int lo = (qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
    int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = d * static_cast<float>(lo - 16);
    y[j + 16] = d * static_cast<float>(hi - 16);
  }
}

// Q5_1: d and m (f16), then Q5_0's high bits and nibbles, unsigned: d * q + m.
void q5_1(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint32_t qh = load_u32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    int lo = (qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
    int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = d * static_cast<float>(lo) + m;
    y[j + 16] = d * static_cast<float>(hi) + m;
  }
}

// Q8_0: d (f16), then 32 signed bytes.
void q8_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// The K-quants' eight 6-bit scales and mins, packed into 12 bytes: bytes 0-3 hold scales 0-3
// in their low six bits, bytes 4-7 mins 0-3 likewise; scales and mins 4-7 take their low four
// bits from the nibbles of bytes 8-11 (scale low, min high) and their top two bits from the
// top two bits of bytes 0-3 (scales) and 4-7 (mins).
void k_scale_min(const uint8_t* scales, int s, int& scale, int& min) {
  if (s < 4) {
    scale = scales[s] & 0x3f;
    min = scales[s + 4] & 0x3f;
  } else {
    scale = (scales[s + 4] & 0x0f) | ((scales[s - 4] >> 6) << 4);
    min = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
  }
}

// Q4_K: 256 elements as eight sub-blocks of 32. d and dmin (f16), the packed scales and mins,
// then 128 bytes of nibbles: each run of 32 bytes holds sub-block 2g in its low nibbles and
// sub-block 2g + 1 in its high ones. Element: (d * scale) * q - (dmin * min).
void q4_k(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int s = 0; s < 8; ++s) {
    int scale, min;
    k_scale_min(scales, s, scale, min);
    const float ds = d * static_cast<float>(scale);
    const float dm = dmin * static_cast<float>(min);
    const uint8_t* q = qs + (s / 2) * 32;
    const int shift = (s % 2) * 4;
    for (int l = 0; l < 32; ++l)
      y[s * 32 + l] = ds * static_cast<float>((q[l] >> shift) & 0x0f) - dm;
  }
}

// Q5_K: Q4_K with a fifth bit: 32 bytes after the scales whose bit s of byte l is sub-block
// s's element l, then Q4_K's nibbles.
void q5_k(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int s = 0; s < 8; ++s) {
    int scale, min;
    k_scale_min(scales, s, scale, min);
    const float ds = d * static_cast<float>(scale);
    const float dm = dmin * static_cast<float>(min);
    const uint8_t* q = qs + (s / 2) * 32;
    const int shift = (s % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      int v = ((q[l] >> shift) & 0x0f) | (((qh[l] >> s) & 1) << 4);
      y[s * 32 + l] = ds * static_cast<float>(v) - dm;
    }
  }
}

// Q6_K: 256 elements, no min. 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16
// signed 8-bit scales (one per 16 elements), then d (f16). Each half of 128 elements reads
// 64 nibble bytes and 32 pair bytes: its run of 32 elements j (0-3) takes nibble byte
// (j % 2) * 32 + l, low nibble for j < 2 and high for j >= 2, and bits 2j, 2j + 1 of pair byte
// l. Element: (d * scale) * (q - 32).
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_f16(b + 208);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* lo = ql + half * 64;
    const uint8_t* hi = qh + half * 32;
    for (int j = 0; j < 4; ++j) {
      const uint8_t* nib = lo + (j % 2) * 32;
      const int nib_shift = (j / 2) * 4;
      for (int l = 0; l < 32; ++l) {
        const int e = half * 128 + j * 32 + l;
        int q = ((nib[l] >> nib_shift) & 0x0f) | (((hi[l] >> (2 * j)) & 3) << 4);
        y[e] = (d * static_cast<float>(sc[e / 16])) * static_cast<float>(q - 32);
      }
    }
  }
}

void f32(const uint8_t* b, float* y) { std::memcpy(y, b, 4); }
void f16(const uint8_t* b, float* y) { *y = load_f16(b); }
void bf16(const uint8_t* b, float* y) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  *y = bf16_to_f32(h);
}

using BlockFn = void (*)(const uint8_t* block, float* out);

BlockFn block_fn(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return f32;
    case GgmlType::F16:
      return f16;
    case GgmlType::BF16:
      return bf16;
    case GgmlType::Q4_0:
      return q4_0;
    case GgmlType::Q4_1:
      return q4_1;
    case GgmlType::Q5_0:
      return q5_0;
    case GgmlType::Q5_1:
      return q5_1;
    case GgmlType::Q8_0:
      return q8_0;
    case GgmlType::Q4_K:
      return q4_k;
    case GgmlType::Q5_K:
      return q5_k;
    case GgmlType::Q6_K:
      return q6_k;
    default:
      return nullptr;
  }
}

}  // namespace

bool can_dequantize(GgmlType type) { return block_fn(type) != nullptr; }

void dequantize(GgmlType type, std::span<const std::byte> src, std::span<float> dst) {
  BlockFn fn = block_fn(type);
  const GgmlTypeInfo& t = info(type);
  if (!fn) fail("dequantize: no dequantization for ggml type {} yet", t.name);
  const auto block_bytes = static_cast<size_t>(t.block_bytes);
  const auto block_elements = static_cast<size_t>(t.block_elements);
  PRISM_CHECK(src.size() % block_bytes == 0,
              "dequantize: {} bytes are not whole {} blocks of {} bytes", src.size(), t.name,
              block_bytes);
  const size_t blocks = src.size() / block_bytes;
  PRISM_CHECK(dst.size() == blocks * block_elements,
              "dequantize: {} {} blocks hold {} values, the output has room for {}", blocks, t.name,
              blocks * block_elements, dst.size());
  const auto* in = reinterpret_cast<const uint8_t*>(src.data());
  float* out = dst.data();
  for (size_t i = 0; i < blocks; ++i) fn(in + i * block_bytes, out + i * block_elements);
}

}  // namespace prism::quant
