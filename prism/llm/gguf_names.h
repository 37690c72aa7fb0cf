// The tensors of a Hugging Face checkpoint as llama.cpp's converter (convert_hf_to_gguf.py)
// names and shapes them in a GGUF file, per architecture: what gguf_model.cpp reads back and
// gguf_export.cpp writes, said once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "prism/io/store.h"
#include "prism/models/lfm2.h"
#include "prism/models/llama.h"
#include "prism/models/qwen3_5.h"

namespace prism::llm {

struct GgufTensorName {
  std::string hf;                 // the checkpoint's name
  std::string gguf;               // llama.cpp's
  std::vector<int64_t> shape;     // in the GGUF file, outermost first
  std::vector<int64_t> hf_shape;  // in the checkpoint, where it differs (a dim of 1 squeezed)
  bool f32 = false;               // the converter keeps it F32, whatever the file's type
  int64_t rope_heads = 0;  // > 0: query or key heads, whose rows llama.cpp's rope orders its way
  // As io::StoredTensor's: the checkpoint's row r (element c of a row) is the file's row
  // row_order[r] (element column_order[c]); empty where they agree. And the values as stored.
  std::vector<int64_t> row_order, column_order;
  io::StoredTensor::Stored stored_as = io::StoredTensor::Stored::as_is;
};

// Llama ("llama"): the tensors renamed, the query's and key's heads to be reordered for
// llama.cpp's rope (rope_heads), the output layer only when not tied; rope_freqs, computed from
// the config, is not among them.
std::vector<GgufTensorName> llama_gguf_names(const models::LlamaConfig& c);

// LFM 2 ("lfm2"): the tensors renamed; the convolution's kernels [d, 1, taps] stored [d, taps],
// in F32; the output layer only when not tied.
std::vector<GgufTensorName> lfm2_gguf_names(const models::Lfm2Config& c);

// Qwen 3.5 ("qwen35"), the model's tensors (under c.prefix): the norm weights w stored as w + 1
// (but the gated norm's, ssm_norm, which Hugging Face applies as w), A_log as -exp(A_log)
// (ssm_a), dt_bias as ssm_dt.bias, the convolution's kernels [channels, 1, taps] as [channels,
// taps] in F32, and the value heads in llama.cpp's order (qwen35_value_heads); the output
// layer only when not tied.
std::vector<GgufTensorName> qwen35_gguf_names(const models::Qwen3_5Config& c);

// The multi-token prediction head's tensors of a Qwen 3.5 checkpoint (mtp.*, run for
// --speculate=mtp) as the converter writes them after the model's blocks: mtp.layers.i.* as
// block layers + i's (a full-attention layer), mtp.fc as blk.N.nextn.eh_proj,
// mtp.pre_fc_norm_embedding and mtp.pre_fc_norm_hidden as nextn.enorm and nextn.hnorm,
// mtp.norm as nextn.shared_head_norm, the norms stored as w + 1. Every one of a head of
// `mtp_layers` layers; or those `store` holds.
std::vector<GgufTensorName> qwen35_mtp_gguf_names(const models::Qwen3_5Config& c,
                                                  int64_t mtp_layers);
std::vector<GgufTensorName> qwen35_mtp_gguf_names(const models::Qwen3_5Config& c,
                                                  const io::Store& store);

// Qwen 3.5's value heads in llama.cpp's order: its converter moves them from Hugging Face's,
// where the value heads of each key head come together (value head g * per_key + j, key head
// g), to ggml's broadcast order (j * key_heads + g), each `unit` rows or elements long. Returns,
// for each of Hugging Face's positions after the first `skip` (kept in place), the stored one;
// empty when the orders agree (as many value heads as key heads).
std::vector<int64_t> qwen35_value_heads(int64_t key_heads, int64_t value_heads, int64_t unit,
                                        int64_t skip = 0);

}  // namespace prism::llm
