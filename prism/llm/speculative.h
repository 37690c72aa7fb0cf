// Generating tokens one at a time, plainly or by speculative decoding: a drafter guesses the
// next few tokens, the model checks them all in one step (its weights read once for all of
// them), and every guess up to the first wrong one is kept, with the model's own token after
// it. Exact: greedy, the output is plain greedy decoding's; sampling, every token follows the
// model's distribution (Sampler::check's rejection rule). docs/speculative.md tells more.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "prism/llm/engine.h"
#include "prism/llm/sampler.h"

namespace prism::llm {

// Guesses the tokens that follow a conversation.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to `count` guesses for the tokens after `history` (maybe none). `slot`: the model's
  // engine slot that holds the conversation (but its last token or few), for a drafter that
  // reads the model's own state (DraftHead); the others go by `history` alone.
  virtual std::vector<int32_t> draft(std::span<const int32_t> history, int64_t count, int slot) = 0;
};

// Prompt lookup: the tokens that followed the last earlier occurrence of the conversation's
// ending n-gram (the longest of max_ngram down to min_ngram tokens that occurred before). No
// second model: it pays where the answer repeats the prompt or itself (code edits, summaries,
// quotes).
class PromptLookup : public Drafter {
 public:
  explicit PromptLookup(int max_ngram = 3, int min_ngram = 1);
  // None when the conversation's ending never occurred before.
  std::vector<int32_t> draft(std::span<const int32_t> history, int64_t count, int slot) override;

 private:
  int max_ngram_, min_ngram_;
};

// Guesses from a smaller model that shares the tokenizer: its greedy continuation, one step a
// guess. Its engine's slot follows the conversations it is asked about, going back where one
// went another way (Engine::rewind; where it cannot, it starts over).
class DraftModel : public Drafter {
 public:
  explicit DraftModel(Engine& engine, int slot = 0) : engine_(engine), slot_(slot) {}
  std::vector<int32_t> draft(std::span<const int32_t> history, int64_t count,
                             int model_slot) override;

 private:
  Engine& engine_;
  int slot_;
  std::vector<int32_t> held_;  // the tokens the slot holds
};

// Guesses from the model's own multi-token prediction head (Qwen 3.5's `mtp` weights), run by
// its engine (EngineOptions::draft_head; Engine::draft): the head's most likely token, one
// step of the head each, from the model's last hidden state in the slot. No second model,
// and nothing to catch up: the model's steps keep the head's states. Guesses only where the
// slot holds all of the conversation but its last token (a decoding step's).
class DraftHead : public Drafter {
 public:
  explicit DraftHead(Engine& model);
  std::vector<int32_t> draft(std::span<const int32_t> history, int64_t count, int slot) override;

 private:
  Engine& model_;
};

// A command's --speculate as a drafter: "none" (nullptr), "lookup", "draft" with the draft
// model's engine, or "mtp" with the model's (loaded with its head: EngineOptions::draft_head);
// anything else throws a prism::Error that starts with `command`.
std::unique_ptr<Drafter> make_drafter(std::string_view name, std::string_view command,
                                      Engine* draft_model = nullptr, Engine* model = nullptr);

// A command's --speculate, --draft-model and --draft-tokens, checked before any model loads:
// errors start with `command`.
void check_speculation(std::string_view name, std::string_view draft_model, int64_t draft_tokens,
                       std::string_view command);
// Whether --speculate=`name` runs the model's own draft head: its engine is then made with
// EngineOptions::draft_head.
inline bool uses_draft_head(std::string_view name) { return name == "mtp"; }
// Then what they ask for: the drafter (none for "none") and, for "draft", the draft model's
// engine, loaded on `platform` with `options` (the model's, less its mesh and draft head);
// "mtp" drafts with `model`'s head.
struct Speculation {
  std::unique_ptr<Engine> draft_engine;
  std::unique_ptr<Drafter> drafter;
};
Speculation make_speculation(std::string_view name, const std::string& draft_model,
                             Platform& platform, EngineOptions options, std::string_view command,
                             Engine* model = nullptr);

// The most guesses a step checks: the step's window grows with them, and its cost with it.
inline constexpr int64_t kMaxDraftTokens = 32;

struct GeneratorOptions {
  Drafter* drafter = nullptr;  // none: plain decoding
  // The most guesses a step checks; fewer after steps that kept few (GuessBudget).
  int64_t draft_tokens = 4;
  // Called on each step's logits before a token is picked (HeldAnswer::mask: an answer held
  // to a grammar); not with a drafter.
  std::function<void(std::span<float>)> constrain;
};

// How many guesses a step asks for: two more after a step that kept all (up to `most`), one
// fewer after one that did not (transformers' assisted generation does the same); and where
// the share of guesses kept, over the last steps, stays under kSeldom, checking costs more
// than it saves: the next steps go without guesses, 8, then 16, ... up to 64 while it stays
// that low, until a step keeps one.
class GuessBudget {
 public:
  explicit GuessBudget(int64_t most) : most_(most), count_(most) {}
  // The guesses the next step asks for; 0 for a step of a pause.
  int64_t next();
  // What the step's check did.
  void record(size_t kept, size_t drafted);

  static constexpr double kSeldom = 0.15;
  static constexpr int64_t kFirstPause = 8, kLongestPause = 64;

 private:
  int64_t most_, count_;
  double recent_ = 0.5;
  int64_t idle_ = 0, pause_ = kFirstPause;
};

// What a Generator did: its steps (passes over the model's weights), those that checked
// guesses, the guesses checked and those kept.
struct SpeculationStats {
  int64_t passes = 0, checks = 0, drafted = 0, accepted = 0;
};

// One speculative step: the tokens of `context` the engine's slot has not run (its position
// is within `context`) and the drafter's guesses after `context`, as many as `budget` asks for
// and the cache holds, in one pass. Returns the tokens it decided: the guesses the model
// agrees with (Sampler::check), then the model's own token after them; the slot is rewound to
// hold `context` and the kept guesses. Empty, and nothing run, when there are no guesses to
// check: the caller takes a plain step. `stats` counts the pass and the check.
std::vector<int32_t> check_guesses(Engine& engine, int slot, Sampler& sampler, Drafter& drafter,
                                   GuessBudget& budget, std::span<const int32_t> context,
                                   SpeculationStats& stats);

// The tokens of one answer after the conversation `context` (the engine slot's tokens, and
// maybe a few it has not run yet), one at a time. Each next() token joins `context`; the
// engine may run ahead of what was taken (a step decides several tokens), so end an answer
// with stop(), which takes the engine back to `context`. The answer starts after `context`
// as given: the sampler's frequency and presence penalties count its tokens alone
// (Sampler::start_generation).
class Generator {
 public:
  Generator(Engine& engine, Sampler& sampler, std::vector<int32_t>& context,
            GeneratorOptions options = {}, int slot = 0);
  // The next token. The first call runs what the engine has not run of `context`.
  int32_t next();
  // Whether the cache is full: the engine cannot run the last token taken.
  bool full() const;
  // Ends the answer: tokens decided but not taken are dropped, and the engine forgets what it
  // ran past `context` (which may have lost tokens since: an end-of-sequence id).
  void stop();
  const SpeculationStats& stats() const { return stats_; }
  // Tokens a step decided that next() has not handed out yet.
  size_t ready() const { return decided_.size(); }

 private:
  void step();

  Engine& engine_;
  Sampler& sampler_;
  std::vector<int32_t>& context_;
  GeneratorOptions options_;
  int slot_;
  std::deque<int32_t> decided_;  // tokens a step decided, not taken yet
  SpeculationStats stats_;
  GuessBudget budget_;
};

}  // namespace prism::llm
