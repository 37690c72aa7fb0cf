// Qwen 3.5, the dense text models (Hugging Face `Qwen3_5ForConditionalGeneration` run on
// text, or `Qwen3_5ForCausalLM`), one readable file pair: the config as config.json states
// it (its `text_config` in the published multimodal checkpoints), and one step of the forward
// pass. Layers alternate Gated DeltaNet linear attention (a causal convolution over q, k, v,
// then the gated delta rule, with a convolution state and a recurrent state per layer) with
// gated full attention (q/k norms, partial rotary embeddings, a KV cache per layer).
#pragma once

#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prism/models/causal_lm.h"
#include "prism/tensor/tensor.h"

namespace prism::models {

struct Qwen3_5Config {
  enum class Layer { linear_attention, full_attention };

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  std::vector<Layer> layers;  // layer_types, or every full_attention_interval-th is full
  // Full attention.
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // head_dim * partial_rotary_factor, rotated rotate-half style
  double rope_theta = 10000;
  // Gated DeltaNet.
  int64_t linear_key_heads = 0;
  int64_t linear_value_heads = 0;
  int64_t linear_key_dim = 0;
  int64_t linear_value_dim = 0;
  int64_t conv_kernel = 0;
  double rms_norm_eps = 1e-6;
  int64_t max_positions = 0;
  bool tie_word_embeddings = false;
  // The multi-token prediction head's layers (mtp_num_hidden_layers): 0 or 1.
  int64_t mtp_layers = 0;
  std::string prefix;  // of the language model's weights: "model.language_model." or "model."
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;

  // Reads config.json (text_config where there is one); `source` names the file in errors.
  static Qwen3_5Config parse(const nlohmann::json& config, std::string_view source);
  // Rotary inverse frequencies over rotary_dim, in f32 as Hugging Face computes them.
  std::vector<double> rope_inv_freq() const;
  // Channels of the convolution: q and k (key heads) and v (value heads).
  int64_t conv_channels() const {
    return 2 * linear_key_heads * linear_key_dim + linear_value_heads * linear_value_dim;
  }
};

class Qwen3_5 : public CausalLM {
 public:
  // Computes in `dtype` (f32 or bf16); the recurrent states and the decay parameters stay f32.
  Qwen3_5(Qwen3_5Config config, DType dtype);
  const Qwen3_5Config& config() const { return config_; }
  const ModelInfo& info() const override { return info_; }

  // Per layer, in order: a linear-attention layer holds its convolution state {s = kernel - 1
  // inputs, c} and its recurrent state (f32 {h, dk, dv}); a full-attention layer its keys
  // and values {h = kv heads, k = seqlen, hd}.
  std::vector<StateSpec> state_specs(int64_t seqlen) const override;

  std::vector<Tensor> forward(const Tensor& tokens, const Tensor& start, const Tensor& last,
                              std::span<const Tensor> states,
                              Logits which = Logits::last) const override;

  bool batches() const override { return true; }
  std::vector<Tensor> decode_batch(const Tensor& tokens, const Tensor& positions,
                                   std::span<const std::vector<Tensor>> states) const override;

  // The multi-token prediction head (weights mtp.*): the token's embedding and the model's
  // final hidden state (after its last norm) before it, each normalized, side by side, mtp.fc
  // down to the model's width, one full-attention layer (mtp.layers.0, as the model's, with a
  // KV cache of its own), mtp.norm, and the model's LM head. Its states, after the model's:
  // the hidden states at every position {k = seqlen, d} (the model's, and the head's own past
  // them while it drafts), then its layer's keys and values, at the position of the hidden
  // state each entry read.
  bool has_draft_head() const override { return config_.mtp_layers > 0; }
  void use_draft_head() override;
  size_t draft_states() const override { return head_ ? 3 : 0; }
  std::vector<Tensor> draft_step(const Tensor& token, const Tensor& position,
                                 std::span<const Tensor> states) const override;

 private:
  std::string lm_head() const;
  Tensor weight(const std::string& name, std::initializer_list<Dim> dims,
                std::optional<DType> dtype = {}, const Sharding& sharding = {}) const;
  Tensor linear(const Tensor& x, const std::string& name, Tag in, Tag out, int64_t n,
                const Sharding& sharding = {}) const;
  Tensor norm(const Tensor& x, const std::string& name, Tag tag) const;  // x (1 + w)
  Tensor mlp(const Tensor& h, const std::string& prefix) const;
  // q, k and v's channels in the fused projection and convolution: where each starts, how many,
  // and its heads' size.
  struct ConvPart {
    int64_t first, channels, head_dim;
  };
  std::vector<ConvPart> conv_parts() const;
  // Token mixers; each returns its output {..., d}. Their stateful middles come as callbacks,
  // for one conversation or each of a batch, which record the new states: the convolution of
  // q, k or v's projection (`part` of conv_parts) with `kernel`; the gated delta rule; and
  // attention of rotated, normalized q, k, v through the KV cache ({..., h, hd}). `last`,
  // where given, marks the window's padding (after it), which leaves the recurrent state as
  // it is.
  using ConvMix =
      std::function<Tensor(size_t part, const Tensor& projection, const Tensor& kernel)>;
  using RuleMix = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& g, const Tensor& beta)>;
  using AttentionMix = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v)>;
  Tensor linear_attention(const Tensor& x, const std::string& p, const std::optional<Tensor>& last,
                          const ConvMix& conv, const RuleMix& rule) const;
  Tensor full_attention(const Tensor& x, const std::string& p, const Tensor& cos, const Tensor& sin,
                        const AttentionMix& mix) const;
  Tensor rotate(const Tensor& t, const Tensor& cos, const Tensor& sin) const;
  // A full-attention layer's keys and values {..., h, hd} of normalized x: k normalized and
  // rotated.
  std::pair<Tensor, Tensor> keys_values(const Tensor& x, const std::string& p, const Tensor& cos,
                                        const Tensor& sin) const;
  // The draft head's input {..., d}: mtp.fc of the token embeddings and the hidden states
  // before them, each normalized, side by side.
  Tensor head_input(const Tensor& embedded, const Tensor& hidden) const;
  // The head's cache entries (keys, values) of tokens at `positions` (their embeddings
  // `embedded`), each paired with the model's hidden state one position before it, `prior`.
  std::pair<Tensor, Tensor> head_entries(const Tensor& embedded, const Tensor& prior,
                                         const Tensor& positions) const;
  // The head's states after a window of tokens {s} at `start`: their embeddings `embedded`
  // and the model's hidden states after them `hidden` ({s, d}); `states` the head's before.
  std::vector<Tensor> head_window(const Tensor& embedded, const Tensor& hidden,
                                  const Tensor& positions, const Tensor& start,
                                  std::span<const Tensor> states) const;

  Qwen3_5Config config_;
  ModelInfo info_;
  DType dtype_;
  bool head_ = false;  // use_draft_head
};

// make_causal_lm's entry for model_type "qwen3_5" (and "qwen3_5_text").
std::unique_ptr<CausalLM> make_qwen3_5(const nlohmann::json& config, std::string_view source,
                                       DType dtype);

}  // namespace prism::models
