// The LLM engine: a model's executables (one per window size, compiled on first use and kept
// while the engine lives), its weights on the device, and its decode state (KV caches, recurrent
// and convolution states), kept on the device between calls and updated in place. Feeding tokens
// appends to the conversation: a chat turn prefills only the new tokens.
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "prism/io/load.h"
#include "prism/models/causal_lm.h"
#include "prism/quant/ggml_type.h"
#include "prism/runtime/compile.h"
#include "prism/runtime/processes.h"
#include "prism/runtime/sharded.h"

namespace prism::llm {

struct EngineOptions {
  int64_t seqlen =
      4096;  // the longest conversation (the KV caches' length)
             // The compute dtype; unset: the checkpoint's own, bf16 for a checkpoint stored in bf16
  // (config.json's `torch_dtype` or `dtype`) or a GGUF file with any tensor that is not f32
  // (quantized weights are dequantized into it), f32 otherwise (an f16 checkpoint too: prism
  // computes in f32 or bf16, and f16's range does not fit bf16's precision).
  std::optional<DType> dtype = DType::f32;
  // Weights are copied into the platform's memory rather than used in place from a mapped
  // local file: on the CPU the copy sits in 2 MiB pages, and decoding ran ~40 % faster from it
  // than from the page cache's 4 KiB pages (docs/llm.md, Performance). zero_copy = true maps.
  io::LoadOptions load{.zero_copy = false};
  // A fast first answer from a local checkpoint on one device of a platform that uses mapped
  // files in place (the CPU): the first feed() reads the weights the file's mapping holds as
  // they are (no copy before it); then they are copied (into 2 MiB pages, in the layouts the
  // products read fastest) on a thread of their own, and every later call waits for the copy
  // and uses it. Which weights a call reads never depends on timing: the first feed's are the
  // mapped ones, all others the copies.
  bool fast_start = false;
  // Engines that run the same model with the same options can share their programs: each
  // compiles through this cache when one is given, and the programs live while a holder does.
  // Without one, an engine compiles its own and frees them when it goes.
  std::shared_ptr<CompileCache> compile_cache;
  // The devices the model is split across (docs/sharding.md): `{"model", N}` runs it
  // tensor-parallel over N devices of the platform. Empty: one device.
  Mesh mesh;
  // Quantize a safetensors checkpoint's matrices to this ggml type (Q8_0, Q4_0, Q4_K) as they
  // load: the weights a GGUF file of that type would hold (quant::type_for_tensor picks each
  // tensor's type as `prism quantize` does).
  std::optional<quant::GgmlType> quantize;
  // Whether matrices in a block format (a GGUF file's quantized tensors, or `quantize`'s) stay
  // in it in memory, on one device. Unset: where the platform runs the dequantize op itself
  // (the CPU, OpenCL, CUDA); they are dequantized into `dtype` as they load elsewhere. true:
  // on every platform (PJRT through the op's decomposition into graph ops: the memory of the
  // quantized model, at the speed its compiler makes of the decomposition). false: never.
  std::optional<bool> keep_quantized;
  // Load and run the model's multi-token prediction head (models::CausalLM::has_draft_head;
  // Qwen 3.5's `mtp` weights), for speculative decoding's guesses (Engine::draft,
  // --speculate=mtp). Its weights and states join the model's; every step keeps its states.
  bool draft_head = false;
};

// A command's --dtype as EngineOptions::dtype: "auto" (unset: the checkpoint's own), "f32" or
// "bf16"; anything else throws a prism::Error that starts with `command`.
std::optional<DType> compute_dtype(std::string_view name, std::string_view command);
// A command's --quantize as EngineOptions::quantize: "" (none), "q8_0", "q4_0" or "q4_k";
// anything else throws a prism::Error that starts with `command`.
std::optional<quant::GgmlType> quantize_type(std::string_view name, std::string_view command);
// A command's --keep-quantized as EngineOptions::keep_quantized: "auto" (unset), "yes" or "no";
// anything else throws a prism::Error that starts with `command`.
std::optional<bool> keep_quantized(std::string_view name, std::string_view command);

// The window the next step of a prompt runs in, with `remaining` of its tokens left to feed and
// `room` positions left in the cache (remaining <= room): its first min(remaining, window)
// tokens, padded up to the window. Where the platform compiles quickly, from every power of two
// up to 1024, a window the rest fills less than three quarters of giving way to the largest
// one it fills (40 tokens as 32 + 8 rows, not 64); elsewhere from 1, 16, 64, 256, 512 and
// 1024, padded. A rest no compiled window fits gets a window of its own size.
int64_t prefill_window(int64_t remaining, int64_t room, bool compiles_quickly);

// The model's step over a window of `window` tokens for conversations of up to `seqlen`
// positions, compiled with the states donated. Inputs: tokens {s} (i32), start and last (i32
// scalars), then the states; outputs: the logits at `last`, then the updated states.
// With Logits::every, the logits of every token of the window (f32 {s, voc}), and only the
// positional states donated: the others stay as they were, for Engine::rewind.
Executable compile_step(Platform& platform, const models::CausalLM& model, int64_t window,
                        int64_t seqlen, CompileCache* cache = nullptr,
                        models::Logits which = models::Logits::last);
// The same step over the devices of `mesh`, with the states split as the model says.
ShardedExecutable compile_sharded_step(Platform& platform, const models::CausalLM& model,
                                       int64_t window, int64_t seqlen, const Mesh& mesh,
                                       CompileCache* cache = nullptr,
                                       models::Logits which = models::Logits::last);

// One step of the model's draft head (CausalLM::draft_step) for conversations of up to
// `seqlen` positions, the head's states donated. Inputs: the token {s = 1} and the position
// (i32), then the head's states; outputs: the logits (f32 {voc}), then the head's states.
ShardedExecutable compile_draft_step(Platform& platform, const models::CausalLM& model,
                                     int64_t seqlen, const Mesh& mesh,
                                     CompileCache* cache = nullptr);

// The batched decoding step (CausalLM::decode_batch) for `batch` conversations with states for
// `seqlen` positions, over the devices of `mesh`, every state donated. Inputs: tokens {b} and
// positions {b} (i32), then each conversation's states in turn; outputs: the logits (f32
// {b, voc}), then each conversation's states.
ShardedExecutable compile_decode_batch(Platform& platform, const models::CausalLM& model,
                                       int64_t batch, int64_t seqlen, const Mesh& mesh,
                                       CompileCache* cache = nullptr);

// In a run of several processes whose mesh spans them (processes.h, docs/cluster.md), every
// process makes the same engines in the same order; rank 0 then calls them, each call told to
// the others first (set_slots, feed, feed_every, reset, rewind, decode, draft), and the others
// call follow_leader(): it runs each call on their own engines, in step, until rank 0 ends the
// run. The calls' results (logits) are rank 0's to use.
void follow_leader();

class Engine {
 public:
  // `model_uri`: a directory (or https/hf/s3 prefix) with config.json and safetensors, or a
  // GGUF file (prism/llm/gguf_model.h).
  Engine(const std::string& model_uri, Platform& platform, const EngineOptions& options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The model's info, with generation_config.json's eos ids added to config.json's.
  const models::ModelInfo& info() const { return info_; }
  int64_t position() const { return position(0); }
  // The decode states on the (first) device, in the model's state_specs() order.
  const std::vector<Buffer>& states() const { return slots_[0].states[0]; }
  // Every device's decode states and weights (one device unless options.mesh splits it).
  const std::vector<std::vector<Buffer>>& device_states() const { return slots_[0].states; }
  const std::vector<io::Weights>& device_weights() const { return weights_; }
  // The bytes the engine holds on its devices: weights, and every slot's caches and states.
  uint64_t device_bytes() const;
  // fast_start: the seconds calls have waited for the copy of the weights so far.
  double copy_wait_seconds() const { return copy_wait_; }
  const std::vector<Platform*>& devices() const { return devices_; }
  int64_t seqlen() const { return options_.seqlen; }

  // Runs `tokens` at the current position and returns the logits after the last one.
  std::vector<float> feed(std::span<const int32_t> tokens) { return feed(0, tokens); }
  // Forgets the conversation: KV caches are overwritten as positions are reused, other
  // states are cleared.
  void reset() { reset(0); }

  // Several conversations at once: `n` slots in all, each with decode state of its own (KV
  // caches, recurrent and convolution states: memory for `seqlen` positions each) and its
  // own position. Slot 0 is the one feed(tokens) and reset() use. New slots start empty.
  void set_slots(int n);
  int slots() const { return static_cast<int>(slots_.size()); }
  std::vector<float> feed(int slot, std::span<const int32_t> tokens);
  void reset(int slot);
  // The tokens the slot's conversation holds.
  int64_t position(int slot) const;

  // Speculative decoding's check (prism/llm/speculative.h): runs `tokens` as feed() does and
  // returns the logits after each of them, row after row (tokens.size() rows of the
  // vocabulary's size). `extend`: the call continues the last one's (a draft model's guesses,
  // one call each), so that a rewind may go back to where that one began.
  std::vector<float> feed_every(int slot, std::span<const int32_t> tokens, bool extend = false);
  std::vector<float> feed_every(std::span<const int32_t> tokens) { return feed_every(0, tokens); }
  // Takes the slot's conversation back to its first `position` tokens, forgetting the rest.
  // A model with KV caches alone goes back anywhere; one with recurrent or convolution states
  // only as far as the start of the last feed_every (or of the calls that extended it): those
  // states are kept from before it (not updated in place), and the tokens from there to
  // `position` run again, first thing in the next call.
  void rewind(int slot, int64_t position);
  // Whether rewind(slot, position) can go there.
  bool can_rewind(int slot, int64_t position) const;
  // Slot `to` takes the first `position` tokens of slot `from`'s conversation: copies of the
  // states that hold them (for KV caches, their positions up to `position`, rounded up to a
  // power of two: a copy that costs what those positions weigh, however long the caches).
  // `from` keeps its conversation. A prompt cache's way to start a conversation from another
  // slot's start (a shared system prompt) instead of prefilling it again.
  void share(int from, int to, int64_t position);
  // Whether share(from, ..., position) can copy that start: 0 < position <= position(from)
  // (models with recurrent or convolution states: their states hold the conversation's end
  // alone, so position must be all of it, with no tokens a rewind kept waiting).
  bool can_share(int from, int64_t position) const;
  // One token for each of `slots` (distinct), at each slot's position: with a model that
  // batches (CausalLM::batches), one step for all, each weight read once; else slot by slot.
  // Returns each slot's logits, in order.
  std::vector<std::vector<float>> decode(std::span<const int> slots,
                                         std::span<const int32_t> tokens);

  // Whether the engine runs the model's draft head (EngineOptions::draft_head).
  bool runs_draft_head() const { return draft_.has_value(); }
  // Speculative decoding's guesses from the model's draft head: up to `count` tokens after the
  // slot's conversation and `next`, the token after it that the slot has not run; each the
  // head's most likely, one step of the head each (the first from the model's last hidden
  // state, the others from the head's own). Fewer where the cache ends. The slot's
  // conversation stays as it is.
  std::vector<int32_t> draft(int slot, int32_t next, int64_t count);

 private:
  // A model and where its weights are: what the public constructor opens.
  struct Checkpoint {
    std::unique_ptr<models::CausalLM> model;
    models::ModelInfo info;
    io::Store store;
  };
  static Checkpoint open(const std::string& model_uri, const EngineOptions& options);
  Engine(Checkpoint checkpoint, Platform& platform, const EngineOptions& options);
  friend void follow_leader();
  // Where the engine's mesh spans processes: on rank 0, tells the others the call `op`
  // (args, tokens) this thread is about to make, and keeps other threads' calls waiting
  // until the returned Lead goes; nothing elsewhere.
  enum class Call : int32_t { set_slots, feed, feed_every, reset, rewind, decode, draft, share };
  Processes::Lead lead(Call op, std::span<const int64_t> args,
                       std::span<const int32_t> tokens = {});
  // A follower: runs rank 0's call on this engine.
  void obey(Call op, std::span<const int64_t> args, std::span<const int32_t> tokens);
  Processes* processes_ = nullptr;  // where the mesh spans processes
  int32_t id_ = -1;                 // then: the engine's place among the processes' engines
  ShardedExecutable& executable(int64_t window, models::Logits which);
  std::vector<float> run(int slot, std::span<const int32_t> tokens, models::Logits which,
                         bool extend);

  Platform& platform_;
  std::vector<Platform*> devices_;
  EngineOptions options_;
  std::unique_ptr<models::CausalLM> model_;
  models::ModelInfo info_;
  io::Store store_;
  std::vector<io::Weights> weights_;  // per device
  // fast_start: the copy of the weights, made on a thread of its own once the first feed() is
  // done (start_copying), taken by every call after it (take_copies).
  std::function<std::vector<io::Weights>()> copy_;
  std::future<std::vector<io::Weights>> copies_;
  std::atomic<bool> stop_copying_ = false;
  double copy_wait_ = 0;
  void take_copies();
  void start_copying();
  std::vector<models::StateSpec> state_specs_;
  // The states that are not positional (recurrent, convolution), by index: zeroed by reset(),
  // kept by feed_every for rewind(). None for a model of KV caches alone.
  std::vector<size_t> carried_;
  struct Slot {
    std::vector<std::vector<Buffer>> states;  // per device
    int64_t position = 0;                     // the tokens the states hold
    // After feed_every: the states that are not positional as they were before it (per
    // device), the position then and the tokens fed since (before_position + since.size() is
    // position() until the next call that is not an extending feed_every), for rewind().
    std::vector<std::vector<Buffer>> before;
    int64_t before_position = 0;
    std::vector<int32_t> since;
    // Tokens a rewind kept past `position`, run at the start of the next call.
    std::vector<int32_t> pending;
  };
  Slot new_slot();
  std::vector<Slot> slots_;
  std::map<std::pair<int64_t, models::Logits>, ShardedExecutable> executables_;
  std::map<int64_t, ShardedExecutable> batch_executables_;  // decode steps, by batch size
  std::optional<ShardedExecutable> reset_;      // zeros into the non-positional states, on use
  std::map<int64_t, ShardedExecutable> share_;  // share()'s copies, by positions copied
  std::optional<ShardedExecutable> draft_;      // the draft head's step (EngineOptions::draft_head)
};

}  // namespace prism::llm
