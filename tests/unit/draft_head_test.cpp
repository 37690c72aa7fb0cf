// Qwen 3.5's multi-token prediction head as speculative decoding's drafter (--speculate=mtp):
// its guesses against an independent PyTorch implementation of the head (mtp_guesses.json of
// the tiny checkpoints, tools/make_tiny_qwen3_5.py), whichever way the model's steps ran the
// conversation (one window, token by token, batched, checks that were rewound); generation
// with its guesses giving plain greedy decoding's ids; and the errors of asking for a head
// that is not there.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "prism/backends/registry.h"
#include "prism/core/error.h"
#include "prism/llm/speculative.h"
#include "tests/unit/llm_test_util.h"

namespace prism {
namespace {

constexpr const char* kCheckpoints[] = {"qwen3_5/tiny-bf16-tied", "qwen3_5/tiny-bf16-untied"};

std::string path_of(const char* dir) { return std::string(PRISM_TEST_DATA) + "/" + dir; }

// f32 compute, as the reference's: the smallest top-2 margin of its guesses is 0.016.
llm::EngineOptions head_options(DType dtype = DType::f32) {
  llm::EngineOptions o;
  o.seqlen = 64;
  o.dtype = dtype;
  o.load.report = false;
  o.draft_head = true;
  return o;
}

struct Chain {
  std::vector<int32_t> ids;  // the conversation
  int32_t next;              // the token after it
  std::vector<int32_t> guesses;
};

std::vector<Chain> read_chains(const char* dir) {
  std::ifstream in(path_of(dir) + "/mtp_guesses.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<Chain> chains;
  for (const nlohmann::json& c : j["chains"]) {
    chains.push_back({c["ids"].get<std::vector<int32_t>>(), c["next"].get<int32_t>(),
                      c["guesses"].get<std::vector<int32_t>>()});
  }
  return chains;
}

TEST(DraftHead, GuessesAsTheReferenceHead) {
  for (const char* dir : kCheckpoints) {
    SCOPED_TRACE(dir);
    llm::Engine e(path_of(dir), get_platform("cpu"), head_options());
    ASSERT_TRUE(e.runs_draft_head());
    for (const Chain& c : read_chains(dir)) {
      SCOPED_TRACE(c.ids.size());
      const std::span<const int32_t> ids(c.ids);
      const int64_t k = static_cast<int64_t>(c.guesses.size());
      // The conversation in one window (a prompt's prefill).
      e.reset();
      e.feed(ids);
      EXPECT_EQ(e.draft(0, c.next, k), c.guesses);
      // Again: guessing left the conversation as it was.
      EXPECT_EQ(e.position(), std::ssize(ids));
      EXPECT_EQ(e.draft(0, c.next, k), c.guesses);
      // A window of 3, then token by token (decoding steps).
      e.reset();
      e.feed(ids.first(3));
      for (size_t i = 3; i < ids.size(); ++i) e.feed(ids.subspan(i, 1));
      EXPECT_EQ(e.draft(0, c.next, k), c.guesses);
      // Batched decoding steps of two conversations: the same one in slots 1 and 2, one token
      // behind the other for a start.
      e.set_slots(3);
      e.reset(1);
      e.reset(2);
      e.feed(1, ids.first(5));
      e.feed(2, ids.first(4));
      e.feed(2, ids.subspan(4, 1));
      for (size_t i = 5; i < ids.size(); ++i) {
        const int slots[] = {1, 2};
        const int32_t tokens[] = {ids[i], ids[i]};
        e.decode(slots, tokens);
      }
      EXPECT_EQ(e.draft(1, c.next, k), c.guesses);
      EXPECT_EQ(e.draft(2, c.next, k), c.guesses);
      // Speculative checks that kept some of their guesses: each rewound, its tokens run again
      // first thing in the next call.
      e.reset();
      e.feed(ids.first(4));
      std::vector<int32_t> check(ids.begin() + 4, ids.begin() + 8);
      check.push_back(7);  // a wrong guess
      e.feed_every(0, check);
      e.rewind(0, 8);
      if (ids.size() > 9) {  // one more check from there, all kept
        e.feed_every(0, ids.subspan(8, ids.size() - 8));
      } else {
        e.feed(ids.subspan(8));
      }
      EXPECT_EQ(e.draft(0, c.next, k), c.guesses);
      // Also after a rewind whose kept tokens have not run again yet.
      e.reset();
      e.feed(ids.first(ids.size() - 3));
      std::vector<int32_t> tail(ids.end() - 3, ids.end());
      tail.push_back(c.next == 5 ? 6 : 5);
      e.feed_every(0, tail);
      e.rewind(0, std::ssize(ids));
      EXPECT_EQ(e.draft(0, c.next, k), c.guesses);
      e.set_slots(1);
    }
  }
}

// The guesses of the conversation in one window, then a few decoding steps: the first of the
// reference's points, or all of them.
void expect_reference_guesses(llm::Engine& e, const char* dir, bool all = true) {
  std::vector<Chain> chains = read_chains(dir);
  if (!all) chains.resize(1);
  for (const Chain& c : chains) {
    SCOPED_TRACE(c.ids.size());
    const std::span<const int32_t> ids(c.ids);
    e.reset();
    e.feed(ids.first(ids.size() - 2));
    e.feed(ids.subspan(ids.size() - 2, 1));
    e.feed(ids.last(1));
    EXPECT_EQ(e.draft(0, c.next, std::ssize(c.guesses)), c.guesses);
  }
}

// The head from a GGUF file (llama.cpp's converter writes it as the block after the model's,
// nextn.*), and split across two devices as the model is: the same guesses.
TEST(DraftHead, FromGgufAndAcrossDevices) {
  Platform& cpu = get_platform("cpu");
  {
    SCOPED_TRACE("gguf");
    llm::Engine e(std::string(PRISM_GGUF_DIR) + "/qwen3_5-tiny-bf16-tied.gguf", cpu,
                  head_options());
    expect_reference_guesses(e, "qwen3_5/tiny-bf16-tied");
  }
  for (const char* dir : kCheckpoints) {
    SCOPED_TRACE(std::string(dir) + " on two devices");
    llm::EngineOptions o = head_options();
    o.mesh = Mesh({{"model", 2}});
    llm::Engine e(path_of(dir), cpu, o);
    ASSERT_EQ(e.devices().size(), 2u);
    expect_reference_guesses(e, dir);
  }
}

// Every platform available here runs the head alike (OpenCL on PoCL and the XLA CPU plugin in
// CI): at the first point only, three programs (PoCL compiles each for seconds).
TEST(DraftHead, OnEveryPlatform) {
  for (const PlatformStatus& s : platform_statuses()) {
    if (!s.available || s.name == "cpu") continue;
    SCOPED_TRACE(s.name);
    llm::Engine e(path_of("qwen3_5/tiny-bf16-untied"), get_platform(s.name), head_options());
    expect_reference_guesses(e, "qwen3_5/tiny-bf16-untied", false);
  }
}

// Generation with the head's guesses is plain greedy decoding, in the checkpoints' bf16 too.
TEST(DraftHead, GreedyOutputIsPlainGreedy) {
  for (const char* dir : kCheckpoints) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(dir) + " " + std::string(name(dtype)));
      llm::Engine e(path_of(dir), get_platform("cpu"), head_options(dtype));
      const testing::LlmReference ref =
          testing::read_llm_reference(path_of(dir) + "/reference.json");
      llm::Sampler sampler({});
      std::vector<int32_t> context = ref.prompt;
      llm::Generator plain(e, sampler, context);
      std::vector<int32_t> want;
      for (size_t i = 0; i < ref.greedy.size(); ++i) want.push_back(plain.next());
      plain.stop();
      if (dtype == DType::f32) {
        EXPECT_EQ(want, ref.greedy);
      }
      for (int64_t k : {1, 3}) {
        SCOPED_TRACE(k);
        e.reset();
        context = ref.prompt;
        llm::DraftHead head(e);
        llm::Generator g(e, sampler, context, {.drafter = &head, .draft_tokens = k});
        std::vector<int32_t> got;
        for (size_t i = 0; i < want.size(); ++i) got.push_back(g.next());
        g.stop();
        EXPECT_EQ(got, want);
        EXPECT_GT(g.stats().drafted, 0);
        EXPECT_EQ(context.size(), ref.prompt.size() + want.size());
      }
    }
  }
}

// A head only where the checkpoint has one, loaded: each mistake one clear error.
TEST(DraftHead, RefusesWhatIsNotThere) {
  Platform& cpu = get_platform("cpu");
  try {
    llm::Engine e(path_of("llama/tiny-f32"), cpu, head_options());
    ADD_FAILURE() << "a llama checkpoint ran a draft head";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no multi-token prediction head"), std::string::npos)
        << e.what();
  }
  llm::EngineOptions plain = head_options();
  plain.draft_head = false;
  llm::Engine e(path_of("qwen3_5/tiny-bf16-untied"), cpu, plain);
  EXPECT_FALSE(e.runs_draft_head());
  EXPECT_THROW(llm::DraftHead{e}, Error);
  EXPECT_THROW(llm::make_drafter("mtp", "llm", nullptr, &e), Error);
  EXPECT_THROW(llm::make_drafter("mtp", "llm"), Error);
  EXPECT_THROW(llm::check_speculation("mtp", "other-model", 4, "llm"), Error);
  EXPECT_NO_THROW(llm::check_speculation("mtp", "", 4, "llm"));

  // A GGUF file whose head lacks a tensor runs as a model without one.
  const std::string headless = std::string(PRISM_GGUF_DIR) + "/bad-qwen35-head.gguf";
  llm::Engine runs(headless, cpu, plain);
  EXPECT_EQ(runs.feed(std::vector<int32_t>{1, 2, 3}).size(),
            static_cast<size_t>(runs.info().vocab_size));
  try {
    llm::Engine e(headless, cpu, head_options());
    ADD_FAILURE() << "a GGUF file with half a head ran it";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no multi-token prediction head"), std::string::npos)
        << e.what();
  }

  llm::Engine head(path_of("qwen3_5/tiny-bf16-untied"), cpu, head_options());
  EXPECT_THROW(head.draft(0, 5, 2), Error);  // nothing run yet
  const std::vector<int32_t> ids{1, 2, 3};
  head.feed(ids);
  EXPECT_THROW(head.draft(0, -1, 2), Error);
  EXPECT_THROW(head.draft(0, 1 << 30, 2), Error);
  EXPECT_THROW(head.draft(3, 5, 2), Error);
  // Where the cache ends, fewer guesses: each writes the head's state one position on.
  head.feed(std::vector<int32_t>(60, 9));
  EXPECT_EQ(head.draft(0, 5, 4).size(), 1u);
  // The drafter guesses only after a conversation the slot holds but its last token.
  llm::DraftHead drafter(head);
  std::vector<int32_t> history(63, 9);
  history.push_back(5);
  EXPECT_EQ(drafter.draft(history, 4, 0).size(), 1u);
  history.push_back(6);
  EXPECT_TRUE(drafter.draft(history, 4, 0).empty());
}

}  // namespace
}  // namespace prism
