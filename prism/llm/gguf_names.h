// The tensors of a Hugging Face checkpoint as llama.cpp's converter (convert_hf_to_gguf.py)
// names and shapes them in a GGUF file, per architecture: what gguf_model.cpp reads back and
// gguf_export.cpp writes, said once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "prism/models/lfm2.h"
#include "prism/models/llama.h"

namespace prism::llm {

struct GgufTensorName {
  std::string hf;                 // the checkpoint's name
  std::string gguf;               // llama.cpp's
  std::vector<int64_t> shape;     // in the GGUF file, outermost first
  std::vector<int64_t> hf_shape;  // in the checkpoint, where it differs (a dim of 1 squeezed)
  bool f32 = false;               // the converter keeps it F32, whatever the file's type
  int64_t rope_heads = 0;  // > 0: query or key heads, whose rows llama.cpp's rope orders its way
};

// Llama ("llama"): the tensors renamed, the query's and key's heads to be reordered for
// llama.cpp's rope (rope_heads), the output layer only when not tied; rope_freqs, computed from
// the config, is not among them.
std::vector<GgufTensorName> llama_gguf_names(const models::LlamaConfig& c);

// LFM 2 ("lfm2"): the tensors renamed; the convolution's kernels [d, 1, taps] stored [d, taps],
// in F32; the output layer only when not tied.
std::vector<GgufTensorName> lfm2_gguf_names(const models::Lfm2Config& c);

}  // namespace prism::llm
