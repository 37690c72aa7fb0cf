// The interface every language model presents to the engine: what it is (vocabulary, context
// length, special ids), the decode state it keeps on the device between steps (KV caches,
// recurrent and convolution states), and one step of its forward pass over a window of tokens.
// Architectures register by config.json's `model_type`.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prism/tensor/tensor.h"

namespace prism::models {

// What the engine and the commands need to know of any causal language model.
struct ModelInfo {
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t max_positions = 0;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;

  // Adds an `eos_token_id` value (one id, a list, or null) to eos_token_ids, skipping known
  // ones: config.json and generation_config.json each may name some.
  void add_eos_token_ids(const nlohmann::json& value);
  // Reads `eos_token_id` and `bos_token_id` where `config` has them.
  void read_special_ids(const nlohmann::json& config);
};

// One tensor of decode state. A positional state (a KV cache) is written at the positions
// being fed and read only below them, so it needs no clearing between conversations; any
// other state (a recurrent or convolution state) is cleared when a conversation starts over.
// The mesh axis the models split over for tensor parallelism (`--devices=N` is {model: N}).
inline constexpr const char* kModelAxis = "model";
// The tag of a positional state's positions (a KV cache's {h, k, hd}).
inline constexpr const char* kPositionAxis = "k";

struct StateSpec {
  Shape shape;
  bool positional = false;
  // How the state is split on a mesh (a KV cache by heads, as the projections that fill it).
  Sharding sharding = {};
};

// Which logits a step returns.
enum class Logits {
  last,   // the token's at index `last`: f32 {voc}
  every,  // every window token's: f32 {s, voc} (speculative decoding checks guesses at once)
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelInfo& info() const = 0;

  // The decode state for conversations of up to `seqlen` positions, in forward's order.
  virtual std::vector<StateSpec> state_specs(int64_t seqlen) const = 0;

  // One step over a window: `tokens` {s} (i32) at positions start..start+s-1, of which those
  // at indices 0..last are real and the rest padding; padding must leave the state as the
  // real tokens leave it. Returns the logits `which` says (the token's at index `last`, or
  // every token's), then the updated states in state_specs' order.
  virtual std::vector<Tensor> forward(const Tensor& tokens, const Tensor& start, const Tensor& last,
                                      std::span<const Tensor> states,
                                      Logits which = Logits::last) const = 0;

  // Whether decode_batch is implemented.
  virtual bool batches() const { return false; }
  // One decoding step of several conversations at once: `tokens` {b} (i32), conversation i's
  // next token at its position `positions`[i] (i32 {b}); `states[i]` are conversation i's
  // states. The products run once for the whole batch, so each weight is read once per step
  // whatever the number of conversations. Returns the logits (f32 {b, voc}), then each
  // conversation's updated states in turn.
  virtual std::vector<Tensor> decode_batch(const Tensor& tokens, const Tensor& positions,
                                           std::span<const std::vector<Tensor>> states) const {
    return {};
  }

  // Multi-token prediction: a head of the model's own that guesses the token after next from
  // the model's last hidden state and the next token (Qwen 3.5's `mtp` weights), speculative
  // decoding's drafter (docs/speculative.md). Whether the checkpoint declares one.
  virtual bool has_draft_head() const { return false; }
  // Runs the head from now on (set before the model is traced): state_specs ends with the
  // head's draft_states() states, which forward and decode_batch keep up to date as they run
  // tokens. Throws where the model has no head.
  virtual void use_draft_head();
  // How many of the last state_specs are the head's; 0 while it is not used.
  virtual size_t draft_states() const { return 0; }
  // One step of the head: reads the hidden state at `position` (i32 scalar; the model's, or the
  // last draft_step's) and `token` {s = 1} (i32), the token at position + 1; returns the logits
  // for the token at position + 2 (f32 {voc}), then the head's states (`states`, the last
  // draft_states() of state_specs) updated, the head's own hidden state kept at position + 1
  // for a next step. Writes only at positions past the model's hidden state it read, which the
  // model's next step overwrites.
  virtual std::vector<Tensor> draft_step(const Tensor& token, const Tensor& position,
                                         std::span<const Tensor> states) const;

  // Weights kept in one of ggml's block formats (Q8_0, Q4_K, ...), by name: the engine sets
  // them for a GGUF file's quantized matrices (and --quantize's) where the platform multiplies
  // blocks as they are. The model then declares each such weight {rows, cols} as a parameter of
  // its blocks, u8 {rows, cols / block_elements * block_bytes}, dequantized in the graph
  // (Tensor::dequantize); the CPU's products read the blocks without dequantizing them to
  // memory. Set before the model is traced.
  void set_quantized_weights(std::map<std::string, quant::GgmlType, std::less<>> formats) {
    quantized_ = std::move(formats);
  }
  const std::map<std::string, quant::GgmlType, std::less<>>& quantized_weights() const {
    return quantized_;
  }

 protected:
  // forward's hidden rows {s, d} that the LM head reads: the one at index `last`, or all.
  static Tensor head_rows(const Tensor& x, const Tensor& last, Logits which);
  // The LM head's output {s, voc} as forward returns it: f32, {voc} for Logits::last.
  static Tensor logits_output(const Tensor& logits, Logits which);

  // The weight `name` of `shape` as the model computes with it: a parameter of that shape, or
  // the dequantized blocks of one kept quantized (a matrix whose rows are whole blocks).
  Tensor parameter(const std::string& name, const Shape& shape, const Sharding& sharding) const;

 private:
  std::map<std::string, quant::GgmlType, std::less<>> quantized_;
};

// The conversations of a decoding batch, for decode_batch: each one's position as a scalar,
// its row of a batched tensor (tag "b"), and rows joined back into a batch.
class Conversations {
 public:
  explicit Conversations(const Tensor& positions);  // i32 {b}
  int64_t size() const { return static_cast<int64_t>(at_.size()); }
  const Tensor& position(int64_t i) const { return at_[i]; }
  // Row i of `t` along "b", that tag renamed `as` (size 1).
  static Tensor row(const Tensor& t, int64_t i, Tag as);
  // Rows of tag "b" (size 1 each) side by side.
  Tensor join(const std::vector<Tensor>& rows) const;

 private:
  std::vector<Tensor> at_;
};

// The architecture config.json names (`model_type`), computing in `dtype`; `source` names the
// file in errors. An unknown model_type is an error that lists the supported ones.
std::unique_ptr<CausalLM> make_causal_lm(const nlohmann::json& config, std::string_view source,
                                         DType dtype);

// The model_type values make_causal_lm knows.
std::vector<std::string> supported_model_types();

}  // namespace prism::models
