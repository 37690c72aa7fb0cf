// f32 to ggml's block formats: the inverse of dequantize.h, for writing GGUF files and for
// showing a format's effect on a model's outputs. Plain scalar code, compiled with contraction
// off like the dequantizers, so that every product and sum rounds where the references round.
//
//   - Q8_0, Q4_0 and Q5_0 are bit for bit the `gguf` Python package's gguf.quants.quantize (which
//   is
//     ggml's reference quantization): tests/unit/quantize_test.cpp checks a fixture the package
//     wrote.
//   - Q4_K has no quantizer in the package: it follows ggml's reference (quantize_row_q4_K_ref,
//     what llama-quantize runs without an importance matrix); tools/check_quantize_llamacpp.sh
//     compares it with llama-quantize's output where llama.cpp is built.
//   - F16 and BF16 round to nearest even (BF16 keeps NaNs quiet), as ggml and the package do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "prism/quant/ggml_type.h"

namespace prism::quant {

// F32, F16, BF16, Q8_0, Q4_0, Q5_0 and Q4_K.
bool can_quantize(GgmlType type);

// Quantizes whole blocks: `src` holds n * block_elements values, `dst` receives n blocks of
// `type` (n * block_bytes bytes, as a GGUF file stores them). Throws prism::Error for a type
// without a quantizer or sizes that disagree.
void quantize(GgmlType type, std::span<const float> src, std::span<std::byte> dst);

// The type llama.cpp's tools give a tensor of `shape` (outermost first) when `wanted` is
// asked for: tensors of fewer than two dims (norms, rope factors) stay F32; a quantized type
// needs rows of whole blocks, and a tensor whose rows are not falls back as llama-quantize's
// does: Q4_K to Q5_0 where rows are whole blocks of 32, then to F16 where no block type fits.
GgmlType type_for_tensor(GgmlType wanted, std::span<const int64_t> shape);

}  // namespace prism::quant
