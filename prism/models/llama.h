// Llama 3.1 / 3.2 (Hugging Face `LlamaForCausalLM`), one readable file pair: the config as
// config.json states it, and the forward pass of one step over a window of tokens with a KV
// cache per layer.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "prism/models/causal_lm.h"
#include "prism/tensor/tensor.h"

namespace prism::models {

struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_positions = 0;
  double rope_theta = 10000;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  struct Llama3Scaling {  // rope_scaling with rope_type "llama3"
    double factor, low_freq_factor, high_freq_factor;
    int64_t original_max_positions;
  };
  std::optional<Llama3Scaling> rope_scaling;
  // Or each rotary frequency divided by its own factor (head_dim / 2 of them): how GGUF files
  // carry llama3 scaling (the `rope_freqs` tensor llama.cpp's converter computes from it).
  std::vector<double> rope_freq_factors;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;

  // Reads config.json's fields; `source` names the file in errors.
  static LlamaConfig parse(const nlohmann::json& config, std::string_view source);
  // Rotary inverse frequencies, with llama3 scaling or the frequency factors applied when
  // configured.
  std::vector<double> rope_inv_freq() const;
};

class Llama : public CausalLM {
 public:
  // Computes in `dtype` (f32 or bf16): weights are declared in it, the loader converts.
  Llama(LlamaConfig config, DType dtype);
  const LlamaConfig& config() const { return config_; }
  const ModelInfo& info() const override { return info_; }

  // The KV cache: for each layer, keys then values, {h=kv heads, k=max_seq, hd}.
  std::vector<Shape> cache_shapes(int64_t max_seq) const;
  std::vector<StateSpec> state_specs(int64_t seqlen) const override;

  // One step: `tokens` {s} (i32) at positions start..start+s-1, caches as cache_shapes.
  // Returns the logits (f32 {voc}) of the token at index `last` of the window, then the
  // updated caches (the window's keys and values written at `start`).
  std::vector<Tensor> forward(const Tensor& tokens, const Tensor& start, const Tensor& last,
                              std::span<const Tensor> caches,
                              Logits which = Logits::last) const override;

  bool batches() const override { return true; }
  std::vector<Tensor> decode_batch(const Tensor& tokens, const Tensor& positions,
                                   std::span<const std::vector<Tensor>> caches) const override;

 private:
  Tensor weight(const std::string& name, std::initializer_list<Dim> dims,
                const Sharding& sharding = {}) const;
  Tensor linear(const Tensor& x, const std::string& name, Tag in, Tag out, int64_t n,
                const Sharding& sharding = {}) const;
  Tensor norm(const Tensor& x, const std::string& name) const;
  Tensor embedding() const;
  Tensor lm_head(const Tensor& x) const;
  struct Qkv {
    Tensor q, k, v;
  };
  Qkv attention_inputs(const Tensor& h, int64_t layer, const Tensor& cos, const Tensor& sin) const;
  Tensor layer_output(const Tensor& x, const Tensor& attended, int64_t layer) const;

  LlamaConfig config_;
  ModelInfo info_;
  DType dtype_;
};

// make_causal_lm's entry for model_type "llama".
std::unique_ptr<CausalLM> make_llama(const nlohmann::json& config, std::string_view source,
                                     DType dtype);

}  // namespace prism::models
