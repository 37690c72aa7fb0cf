// LFM 2 / 2.5 (Hugging Face `Lfm2ForCausalLM`, model_type "lfm2"), one readable file pair: a
// hybrid of gated short-convolution blocks and grouped-query attention blocks (with RMSNorms of
// q and k), each followed by a SwiGLU MLP. Its decode state: a KV cache per attention layer and
// the last few convolution inputs per convolution layer.
#pragma once

#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "prism/models/causal_lm.h"
#include "prism/tensor/tensor.h"

namespace prism::models {

struct Lfm2Config {
  enum class Layer { conv, attention };

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // the MLP width, after block_auto_adjust_ff_dim
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_positions = 0;
  int64_t conv_kernel = 3;  // conv_L_cache: taps of the short convolution
  bool conv_bias = false;   // biases in the convolution block's projections and convolution
  double rope_theta = 1e6;
  double norm_eps = 1e-5;
  bool tie_word_embeddings = true;
  std::vector<Layer> layers;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;

  // Reads config.json's fields, with Hugging Face's defaults; `source` names the file in errors.
  static Lfm2Config parse(const nlohmann::json& config, std::string_view source);
  int64_t num_layers() const { return static_cast<int64_t>(layers.size()); }
};

class Lfm2 : public CausalLM {
 public:
  // Computes in `dtype` (f32 or bf16): weights are declared in it, the loader converts.
  Lfm2(Lfm2Config config, DType dtype);
  const Lfm2Config& config() const { return config_; }
  const ModelInfo& info() const override { return info_; }

  // Per layer, in order: an attention layer's keys then values {h=kv heads, k=seqlen, hd}
  // (positional); a convolution layer's last conv_kernel - 1 inputs {s, d} (cleared on reset).
  std::vector<StateSpec> state_specs(int64_t seqlen) const override;

  std::vector<Tensor> forward(const Tensor& tokens, const Tensor& start, const Tensor& last,
                              std::span<const Tensor> states,
                              Logits which = Logits::last) const override;

  bool batches() const override { return true; }
  std::vector<Tensor> decode_batch(const Tensor& tokens, const Tensor& positions,
                                   std::span<const std::vector<Tensor>> states) const override;

 private:
  Tensor weight(const std::string& name, std::initializer_list<Dim> dims,
                const Sharding& sharding = {}) const;
  Tensor linear(const Tensor& x, const std::string& name, Tag in, Tag out, int64_t n,
                bool bias = false, const Sharding& sharding = {}) const;
  // A block's stateful middle, for one conversation or each of a batch: the convolution of
  // B*x {..., d} with `kernel`, and attention of rotated, normalized q, k, v {..., h, hd}
  // through the KV cache to the merged heads {..., a}. Each records its conversation's new
  // states.
  using ConvMix = std::function<Tensor(const Tensor& bx, const Tensor& kernel)>;
  using AttentionMix = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v)>;
  Tensor short_conv_block(const Tensor& h, const std::string& prefix, const ConvMix& mix) const;
  Tensor mlp(const Tensor& h, const std::string& prefix) const;
  Tensor attention_block(const Tensor& h, const std::string& prefix, const Tensor& cos,
                         const Tensor& sin, const AttentionMix& mix) const;

  Lfm2Config config_;
  ModelInfo info_;
  DType dtype_;
};

// make_causal_lm's entry for model_type "lfm2".
std::unique_ptr<CausalLM> make_lfm2(const nlohmann::json& config, std::string_view source,
                                    DType dtype);

}  // namespace prism::models
