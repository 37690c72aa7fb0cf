// Writes a Hugging Face Llama, LFM 2 or Qwen 3.5 checkpoint as a GGUF file that llama.cpp
// loads, as llama.cpp's converter (convert_hf_to_gguf.py) and llama-quantize would together:
// llama.cpp's tensor names and `general.architecture` (llama, lfm2, qwen35) with its
// hyperparameters, `general.file_type`, the tokenizer (tokenizer.ggml.*) and chat template when
// tokenizer files are there; what the converter does to the tensors, the inverse of what
// gguf_model.cpp undoes (both from gguf_names.h): for Llama each head's query and key rows in
// its rope's order and Llama 3.1's rope scaling as the rope_freqs tensor, for LFM 2 the
// convolution's kernels squeezed to [d, taps] (kept F32), for Qwen 3.5 its norms as w + 1,
// A_log as -exp(A_log) and the linear attention's value heads in llama.cpp's order, with the
// multi-token prediction layer after the model's blocks.
//
// Weights stream tensor by tensor, each in chunks of rows (whole where its rows move across it:
// Qwen 3.5's value heads): read, converted to f32, reordered, quantized (prism/quant/quantize.h)
// and written, so that no more than a chunk of the model is held at once. The file appears only
// when complete (io::GgufWriter).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "prism/quant/ggml_type.h"

namespace prism::llm {

struct GgufExportOptions {
  // The matrices' type: F32, F16, BF16, Q8_0, Q4_0 or Q4_K. 1-D tensors stay F32 and matrices
  // whose rows do not fit the type's blocks fall back (quant::type_for_tensor).
  quant::GgmlType type = quant::GgmlType::F16;
  // A directory with tokenizer.json (and tokenizer_config.json); empty: the checkpoint's own,
  // when it has one. Without either the file has no tokenizer (it runs on token ids).
  std::string tokenizer;
  std::string name;  // general.name; empty: the checkpoint's last path component
};

struct GgufExportReport {
  std::map<quant::GgmlType, int> tensors;  // how many tensors of each type were written
  uint64_t bytes = 0;                      // the tensors' bytes
  bool tokenizer = false;                  // whether a tokenizer section was written
};

// Writes `checkpoint` (a directory or any URI io::Store opens, with config.json) to the local
// file `out`. Throws prism::Error, leaving no file, for a model_type other than llama, lfm2 and
// qwen3_5, a missing tensor or one of other sizes than config.json implies, a tokenizer that is not
// byte-level BPE with a known pre-tokenizer, a type without a quantizer or an unwritable path.
GgufExportReport export_gguf(const std::string& checkpoint, const std::string& out,
                             const GgufExportOptions& options);

// llama.cpp's `general.file_type` (LLAMA_FTYPE_*) for files whose matrices are mostly `type`.
uint32_t llama_file_type(quant::GgmlType type);

}  // namespace prism::llm
