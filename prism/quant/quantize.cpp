#include "prism/quant/quantize.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "prism/core/dtype.h"
#include "prism/core/error.h"

namespace prism::quant {
namespace {

static_assert(std::endian::native == std::endian::little,
              "ggml blocks are little-endian; stores below would need byte swaps");

void store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Round half away from zero: C's roundf, which ggml's Q8_0 and the package's np_roundf use.
int round_away(float v) { return static_cast<int>(std::round(v)); }

// ggml's nearest_int adds 1.5 * 2^23 in float, which rounds half to even: nearbyint in the
// default rounding mode, for the |v| < 2^22 the K-quants feed it.
int nearest_even(float v) { return static_cast<int>(std::nearbyint(v)); }

// Q8_0: d = max|x| / 127, each x * (1 / d) rounded half away from zero. The reciprocal is
// taken of the f32 d, not of the f16 one stored, as the references do.
void q8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0 ? 1 / d : 0;
  store_f16(b, d);
  for (int j = 0; j < 32; ++j)
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(round_away(x[j] * id)));
}

// The value of largest magnitude of a block of 32, the first of equals, sign kept.
float extreme_of(const float* x) {
  float amax = 0, extreme = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      extreme = x[j];
    }
  }
  return extreme;
}

// Q4_0: the value of largest magnitude (the first, on ties) maps to -8, so its sign is kept
// exactly and the other end of the range gets 7 steps; q = trunc(x / d + 8.5), at most 15.
void q4_0(const float* x, uint8_t* b) {
  const float d = extreme_of(x) / -8;
  const float id = d != 0 ? 1 / d : 0;
  store_f16(b, d);
  auto q = [&](float v) { return std::min(15, static_cast<int>(v * id + 8.5f)); };
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(q(x[j]) | (q(x[j + 16]) << 4));
}

// Q5_0: Q4_0 with a fifth bit. The value of largest magnitude maps to -16; q = trunc(x / d +
// 16.5), at most 31. The low four bits are nibbles as Q4_0's (element j low, j + 16 high, in
// the 16 bytes at 6); the fifth bits form the little-endian 32-bit word at 2, bit j for
// element j.
void q5_0(const float* x, uint8_t* b) {
  const float d = extreme_of(x) / -16;
  const float id = d != 0 ? 1 / d : 0;
  store_f16(b, d);
  uint32_t high = 0;
  for (int j = 0; j < 32; ++j) {
    const int q = std::min(31, static_cast<int>(x[j] * id + 16.5f));
    high |= static_cast<uint32_t>(q >> 4) << j;
    if (j < 16) {
      b[6 + j] = static_cast<uint8_t>(q & 15);
    } else {
      b[6 + j - 16] = static_cast<uint8_t>(b[6 + j - 16] | ((q & 15) << 4));
    }
  }
  std::memcpy(b + 2, &high, 4);
}

// Q4_K, after ggml's reference quantization (quantize_row_q4_K_ref). Each sub-block of 32 is
// fitted as scale * q - offset (q in 0..15, offset >= 0) by a weighted least-squares search
// over 21 candidate scales, each weight being the sub-block's RMS plus |x| (large values
// matter more). The eight scales and offsets are then quantized to 6 bits against the
// block's largest (d and dmin, f16), and every q recomputed against the rounded scales.
struct SubBlockFit {
  float scale;
  float offset;  // subtracted: x ~ scale * q - offset
};

constexpr int kSub = 32;

SubBlockFit fit_sub_block(const float* x, const float* w, uint8_t* q) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < kSub; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  lo = std::min(lo, 0.0f);  // the offset only ever lowers values: a zero must stay reachable
  if (hi == lo) {
    std::fill(q, q + kSub, 0);
    return {0, -lo};
  }
  auto weighted_error = [&](float scale, float min, const uint8_t* levels) {
    float error = 0;
    for (int i = 0; i < kSub; ++i) {
      const float diff = scale * levels[i] + min - x[i];
      error += w[i] * (diff * diff);
    }
    return error;
  };
  // First guess: the range split into 15 steps.
  float inverse = 15 / (hi - lo);
  float scale = 1 / inverse, min = lo;
  for (int i = 0; i < kSub; ++i) q[i] = std::clamp(nearest_even(inverse * (x[i] - lo)), 0, 15);
  float best = weighted_error(scale, min, q);
  // Then 14 to 16 steps over the range, in tenths, each with the least-squares scale and
  // offset of the levels it gives; the best fit wins. As in ggml, each trial measures the range
  // from the best offset so far, not from the sub-block's minimum.
  std::array<uint8_t, kSub> trial;
  for (int step = 0; step <= 20; ++step) {
    inverse = (-1.0f + 0.1f * step + 15) / (hi - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < kSub; ++i) {
      const int l = std::clamp(nearest_even(inverse * (x[i] - min)), 0, 15);
      trial[i] = static_cast<uint8_t>(l);
      const float wl = w[i] * l;
      sum_l += wl;
      sum_l2 += wl * l;
      sum_xl += wl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float s = (sum_w * sum_xl - sum_x * sum_l) / det;
    float m = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (m > 0) {  // an offset that would raise values: fit the scale alone
      m = 0;
      s = sum_xl / sum_l2;
    }
    const float error = weighted_error(s, m, trial.data());
    if (error < best) {
      std::copy(trial.begin(), trial.end(), q);
      best = error;
      scale = s;
      min = m;
    }
  }
  return {scale, -min};
}

// A 6-bit level of v against 63 / the largest: ggml stores nearest_int's result in a byte
// before capping it at 63, so a negative level wraps to a large one and is capped.
uint8_t six_bits(float inverse, float v) {
  return std::min<uint8_t>(63, static_cast<uint8_t>(nearest_even(inverse * v)));
}

void q4_k(const float* x, uint8_t* b) {
  std::array<uint8_t, 256> levels;
  std::array<float, 8> scales, offsets;
  std::array<float, kSub> weights;
  float max_scale = 0, max_offset = 0;
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + s * kSub;
    float sum_x2 = 0;
    for (int i = 0; i < kSub; ++i) sum_x2 += xs[i] * xs[i];
    const float rms = std::sqrt(sum_x2 / kSub);
    for (int i = 0; i < kSub; ++i) weights[i] = rms + std::fabs(xs[i]);
    const SubBlockFit fit = fit_sub_block(xs, weights.data(), levels.data() + s * kSub);
    scales[s] = fit.scale;
    offsets[s] = fit.offset;
    if (fit.scale > max_scale) max_scale = fit.scale;
    if (fit.offset > max_offset) max_offset = fit.offset;
  }
  // Packed as dequantize.cpp's k_scale_min reads them.
  uint8_t* packed = b + 4;
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_offset = max_offset > 0 ? 63.f / max_offset : 0.f;
  std::array<uint8_t, 8> ls, lm;
  for (int s = 0; s < 8; ++s) {
    ls[s] = six_bits(inv_scale, scales[s]);
    lm[s] = six_bits(inv_offset, offsets[s]);
  }
  for (int s = 0; s < 4; ++s) {
    packed[s] = static_cast<uint8_t>(ls[s] | ((ls[s + 4] >> 4) << 6));
    packed[s + 4] = static_cast<uint8_t>(lm[s] | ((lm[s + 4] >> 4) << 6));
    packed[s + 8] = static_cast<uint8_t>((ls[s + 4] & 0x0f) | ((lm[s + 4] & 0x0f) << 4));
  }
  const uint16_t d_bits = f32_to_f16(max_scale / 63.f);
  const uint16_t dmin_bits = f32_to_f16(max_offset / 63.f);
  std::memcpy(b, &d_bits, 2);
  std::memcpy(b + 2, &dmin_bits, 2);
  // The levels again, against the scales as stored. A sub-block whose stored scale is zero
  // keeps the levels of its fit (they dequantize to -offset all the same).
  const float d = f16_to_f32(d_bits), dmin = f16_to_f32(dmin_bits);
  for (int s = 0; s < 8; ++s) {
    const float ds = d * ls[s];
    if (ds == 0) continue;
    const float dm = dmin * lm[s];
    for (int i = 0; i < kSub; ++i) {
      levels[s * kSub + i] =
          static_cast<uint8_t>(std::clamp(nearest_even((x[s * kSub + i] + dm) / ds), 0, 15));
    }
  }
  // Sub-blocks 2g and 2g + 1 share 32 bytes: low nibbles, then high.
  uint8_t* qs = b + 16;
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < kSub; ++l)
      qs[g * 32 + l] = static_cast<uint8_t>(levels[g * 64 + l] | (levels[g * 64 + 32 + l] << 4));
  }
}

void f32(const float* x, uint8_t* b) { std::memcpy(b, x, 4); }
void f16(const float* x, uint8_t* b) { store_f16(b, *x); }
void bf16(const float* x, uint8_t* b) {
  const uint16_t h = f32_to_bf16(*x);
  std::memcpy(b, &h, 2);
}

using BlockFn = void (*)(const float* in, uint8_t* block);

BlockFn block_fn(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return f32;
    case GgmlType::F16:
      return f16;
    case GgmlType::BF16:
      return bf16;
    case GgmlType::Q8_0:
      return q8_0;
    case GgmlType::Q4_0:
      return q4_0;
    case GgmlType::Q5_0:
      return q5_0;
    case GgmlType::Q4_K:
      return q4_k;
    default:
      return nullptr;
  }
}

}  // namespace

bool can_quantize(GgmlType type) { return block_fn(type) != nullptr; }

void quantize(GgmlType type, std::span<const float> src, std::span<std::byte> dst) {
  BlockFn fn = block_fn(type);
  const GgmlTypeInfo& t = info(type);
  if (!fn) fail("quantize: no quantization to ggml type {}", t.name);
  const auto block_bytes = static_cast<size_t>(t.block_bytes);
  const auto block_elements = static_cast<size_t>(t.block_elements);
  PRISM_CHECK(src.size() % block_elements == 0, "quantize: {} values are not whole {} blocks of {}",
              src.size(), t.name, block_elements);
  const size_t blocks = src.size() / block_elements;
  PRISM_CHECK(dst.size() == blocks * block_bytes,
              "quantize: {} {} blocks take {} bytes, the output has {}", blocks, t.name,
              blocks * block_bytes, dst.size());
  auto* out = reinterpret_cast<uint8_t*>(dst.data());
  for (size_t i = 0; i < blocks; ++i) fn(src.data() + i * block_elements, out + i * block_bytes);
}

GgmlType type_for_tensor(GgmlType wanted, std::span<const int64_t> shape) {
  if (shape.size() < 2) return GgmlType::F32;
  const int64_t row = shape.back();
  auto fits = [&](GgmlType t) { return row % info(t).block_elements == 0; };
  if (fits(wanted)) return wanted;
  if (wanted == GgmlType::Q4_K && fits(GgmlType::Q5_0)) return GgmlType::Q5_0;
  return GgmlType::F16;
}

}  // namespace prism::quant
