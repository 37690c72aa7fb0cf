#include "prism/llm/speculative.h"

#include <algorithm>

#include "prism/core/error.h"

namespace prism::llm {

PromptLookup::PromptLookup(int max_ngram, int min_ngram)
    : max_ngram_(max_ngram), min_ngram_(min_ngram) {
  PRISM_CHECK(min_ngram >= 1 && min_ngram <= max_ngram,
              "prompt lookup: n-grams of {} to {} tokens make no sense", min_ngram, max_ngram);
}

std::vector<int32_t> PromptLookup::draft(std::span<const int32_t> history, int64_t count,
                                         int /*slot*/) {
  const int64_t size = static_cast<int64_t>(history.size());
  if (count <= 0) return {};
  for (int64_t n = std::min<int64_t>(max_ngram_, size - 1); n >= min_ngram_; --n) {
    const std::span<const int32_t> ending = history.last(n);
    // The latest earlier occurrence: the nearest context is the likeliest to go on the same way.
    for (int64_t at = size - n - 1; at >= 0; --at) {
      if (std::equal(ending.begin(), ending.end(), history.begin() + at)) {
        const int64_t from = at + n, to = std::min(from + count, size);
        return {history.begin() + from, history.begin() + to};
      }
    }
  }
  return {};
}

std::vector<int32_t> DraftModel::draft(std::span<const int32_t> history, int64_t count,
                                       int /*model_slot*/) {
  const int64_t size = static_cast<int64_t>(history.size());
  // The guesses after the first run at the positions that follow the conversation.
  count = std::min(count, engine_.seqlen() - size + 1);
  if (history.empty() || count <= 0) return {};
  // Where the slot and the conversation part; the last token runs again if the slot has it, for
  // the logits after it.
  int64_t common = std::mismatch(held_.begin(), held_.end(), history.begin(), history.end()).first -
                   held_.begin();
  common = std::min(common, size - 1);
  if (common < static_cast<int64_t>(held_.size())) {
    if (engine_.can_rewind(slot_, common)) {
      engine_.rewind(slot_, common);
    } else {
      engine_.reset(slot_);
      common = 0;
    }
  }
  std::span<const int32_t> fresh = history.subspan(common);
  if (fresh.size() > 1) {  // a prompt: by itself, with the logits of its last token alone
    engine_.feed(slot_, fresh.first(fresh.size() - 1));
    fresh = fresh.last(1);
  }
  std::vector<float> logits = engine_.feed_every(slot_, fresh);
  held_.assign(history.begin(), history.end());
  std::vector<int32_t> guesses;
  while (true) {
    guesses.push_back(
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    if (static_cast<int64_t>(guesses.size()) == count) break;
    // One run of feed_every calls from the conversation's last token: the next call can go
    // back to any of them.
    logits = engine_.feed_every(slot_, std::span(guesses).last(1), true);
    held_.push_back(guesses.back());
  }
  return guesses;
}

DraftHead::DraftHead(Engine& model) : model_(model) {
  PRISM_CHECK(model.runs_draft_head(),
              "llm: --speculate=mtp drafts with the model's own head: load it with the head "
              "(EngineOptions::draft_head)");
}

std::vector<int32_t> DraftHead::draft(std::span<const int32_t> history, int64_t count, int slot) {
  const int64_t size = static_cast<int64_t>(history.size());
  if (count <= 0 || size < 2 || model_.position(slot) != size - 1) return {};
  return model_.draft(slot, history.back(), count);
}

std::unique_ptr<Drafter> make_drafter(std::string_view name, std::string_view command,
                                      Engine* draft_model, Engine* model) {
  if (name == "none") return nullptr;
  if (name == "lookup") return std::make_unique<PromptLookup>();
  if (name == "draft") {
    PRISM_CHECK(draft_model, "{}: --speculate=draft needs --draft-model=URI", command);
    return std::make_unique<DraftModel>(*draft_model);
  }
  if (name == "mtp") {
    PRISM_CHECK(model && model->runs_draft_head(),
                "{}: --speculate=mtp needs the model loaded with its multi-token prediction head",
                command);
    return std::make_unique<DraftHead>(*model);
  }
  fail("{}: --speculate={} is not one of none, lookup, draft, mtp", command, name);
}

void check_speculation(std::string_view name, std::string_view draft_model, int64_t draft_tokens,
                       std::string_view command) {
  if (name != "draft" && !uses_draft_head(name)) make_drafter(name, command);
  PRISM_CHECK(name != "draft" || !draft_model.empty(),
              "{}: --speculate=draft needs --draft-model=URI", command);
  PRISM_CHECK(name == "draft" || draft_model.empty(), "{}: --draft-model is for --speculate=draft",
              command);
  PRISM_CHECK(draft_tokens >= 1 && draft_tokens <= kMaxDraftTokens,
              "{}: --draft-tokens must be between 1 and {}, got {}", command, kMaxDraftTokens,
              draft_tokens);
}

Speculation make_speculation(std::string_view name, const std::string& draft_model,
                             Platform& platform, EngineOptions options, std::string_view command,
                             Engine* model) {
  Speculation s;
  if (name == "draft") {
    options.mesh = {};
    options.draft_head = false;
    try {
      s.draft_engine = std::make_unique<Engine>(draft_model, platform, options);
    } catch (const Error& e) {  // said of the draft model, not the model
      std::string_view what = e.what();
      if (what.starts_with("llm: ")) what.remove_prefix(5);
      fail("{}: the draft model {}: {}", command, draft_model, what);
    }
  }
  s.drafter = make_drafter(name, command, s.draft_engine.get(), model);
  return s;
}

int64_t GuessBudget::next() {
  if (idle_ > 0) {
    --idle_;
    return 0;
  }
  return count_;
}

void GuessBudget::record(size_t kept, size_t drafted) {
  if (drafted == 0) return;
  count_ = kept == drafted ? std::min(count_ + 2, most_) : std::max<int64_t>(count_ - 1, 1);
  recent_ = 0.7 * recent_ + 0.3 * static_cast<double>(kept) / static_cast<double>(drafted);
  if (kept > 0) pause_ = kFirstPause;
  if (recent_ < kSeldom) {
    idle_ = pause_;
    pause_ = std::min(pause_ * 2, kLongestPause);
    recent_ = kSeldom;  // after the pause, one more step that keeps nothing pauses again
  }
}

Generator::Generator(Engine& engine, Sampler& sampler, std::vector<int32_t>& context,
                     GeneratorOptions options, int slot)
    : engine_(engine),
      sampler_(sampler),
      context_(context),
      options_(options),
      slot_(slot),
      budget_(options.draft_tokens) {
  PRISM_CHECK(options.draft_tokens >= 1 && options.draft_tokens <= kMaxDraftTokens,
              "llm: --draft-tokens must be between 1 and {}, got {}", kMaxDraftTokens,
              options.draft_tokens);
  PRISM_CHECK(!options.drafter || !options.constrain,
              "llm: speculative decoding of an answer held to a grammar is not supported");
  sampler_.start_generation(context_.size());
}

int32_t Generator::next() {
  if (decided_.empty()) step();
  const int32_t token = decided_.front();
  decided_.pop_front();
  context_.push_back(token);
  return token;
}

bool Generator::full() const {
  return decided_.empty() && static_cast<int64_t>(context_.size()) > engine_.seqlen();
}

void Generator::stop() {
  decided_.clear();
  const int64_t size = static_cast<int64_t>(context_.size());
  if (engine_.position(slot_) > size) engine_.rewind(slot_, size);
}

void Generator::step() {
  const int64_t size = static_cast<int64_t>(context_.size());
  if (engine_.position(slot_) > size) engine_.rewind(slot_, size);
  const int64_t at = engine_.position(slot_);
  PRISM_CHECK(at < size, "llm: nothing to feed");
  // No guesses on a prompt's step: its first token comes as fast as without speculation (and
  // on the CPU's fast start, before the weights' copy, which the next step waits for).
  if (options_.drafter && size - at == 1) {
    const std::vector<int32_t> decided =
        check_guesses(engine_, slot_, sampler_, *options_.drafter, budget_, context_, stats_);
    if (!decided.empty()) {
      decided_.insert(decided_.end(), decided.begin(), decided.end());
      return;
    }
  }
  ++stats_.passes;
  std::vector<float> logits = engine_.feed(slot_, std::span<const int32_t>(context_).subspan(at));
  if (options_.constrain) options_.constrain(logits);
  decided_.push_back(sampler_.next(logits, context_));
}

std::vector<int32_t> check_guesses(Engine& engine, int slot, Sampler& sampler, Drafter& drafter,
                                   GuessBudget& budget, std::span<const int32_t> context,
                                   SpeculationStats& stats) {
  const int64_t size = static_cast<int64_t>(context.size());
  const int64_t at = engine.position(slot);
  PRISM_CHECK(at < size, "llm: nothing to feed");
  const int64_t count = std::min(budget.next(), engine.seqlen() - size);
  if (count <= 0) return {};
  std::vector<int32_t> tokens(context.begin() + at, context.end());
  const size_t fresh = tokens.size();
  // A guess the model cannot take (a draft model's vocabulary may be larger) ends them.
  const int64_t vocab = engine.info().vocab_size;
  const std::vector<int32_t> drafts = drafter.draft(context, count, slot);
  for (size_t i = 0; i < std::min<size_t>(drafts.size(), count); ++i) {
    if (drafts[i] < 0 || drafts[i] >= vocab) break;
    tokens.push_back(drafts[i]);
  }
  const std::span<const int32_t> guesses = std::span<const int32_t>(tokens).subspan(fresh);
  if (guesses.empty()) return {};
  const std::vector<float> rows = engine.feed_every(slot, tokens);
  const size_t width = rows.size() / tokens.size();
  // Row fresh - 1 + i holds the model's distribution for the token after guess i's place.
  auto row = [&](size_t i) {
    return std::span<const float>(rows).subspan((fresh - 1 + i) * width, width);
  };
  // Each guess is checked against the model's distribution after the ones before it.
  std::vector<int32_t> history(context.begin(), context.end());
  std::vector<int32_t> decided;
  int32_t after = 0;
  size_t kept = 0;
  for (; kept < guesses.size(); ++kept) {
    bool same = false;
    after = sampler.check(row(kept), history, guesses[kept], same);
    if (!same) break;
    history.push_back(guesses[kept]);
    decided.push_back(guesses[kept]);
  }
  if (kept == guesses.size()) after = sampler.next(row(kept), history);
  decided.push_back(after);
  ++stats.passes;
  ++stats.checks;
  stats.drafted += static_cast<int64_t>(guesses.size());
  stats.accepted += static_cast<int64_t>(kept);
  budget.record(kept, guesses.size());
  engine.rewind(slot, size + static_cast<int64_t>(kept));
  return decided;
}

}  // namespace prism::llm
