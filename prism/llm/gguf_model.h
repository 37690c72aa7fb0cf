// Models from GGUF files (llama.cpp's format): the architecture's config from the file's
// metadata, and its tensors renamed onto the names prism's model declares (reordered, reshaped
// and with their values mapped back where llama.cpp's converter stores them otherwise), so that
// the engine loads a .gguf as it loads a Hugging Face checkpoint. Tensors in ggml's block
// formats are dequantized as they load (io::StoredTensor), into the model's compute dtype.
//
//   auto gguf = llm::open_gguf_model("model-Q8_0.gguf", DType::bf16);
//   // gguf.model->forward(...) declares "model.layers.0.self_attn.q_proj.weight", which
//   // gguf.store holds as the file's "blk.0.attn_q.weight", rows in Hugging Face's order.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "prism/io/gguf.h"
#include "prism/io/store.h"
#include "prism/models/causal_lm.h"

namespace prism::llm {

struct GgufModel {
  std::unique_ptr<models::CausalLM> model;
  io::Store store;  // the file's tensors under the model's names
  io::GgufHeader header;
};

// True when `uri` names a GGUF file (by its ".gguf" name).
bool is_gguf_uri(std::string_view uri);

// The model a GGUF file holds, computing in `dtype`. Architectures (general.architecture):
// llama, lfm2 (LFM 2) and qwen35 (Qwen 3.5's dense text models). An unknown architecture, missing
// metadata, a missing tensor or one whose sizes disagree with the metadata are one prism::Error
// naming the file and what is wrong.
GgufModel open_gguf_model(const std::string& uri, DType dtype);
GgufModel open_gguf_model(std::shared_ptr<io::File> file, io::GgufHeader header, DType dtype);

}  // namespace prism::llm
