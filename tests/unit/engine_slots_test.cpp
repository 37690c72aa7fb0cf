// An engine's slots: conversations side by side, each with its own KV caches, recurrent and
// convolution states and position; interleaved they give what each gives alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>

#include "prism/backends/registry.h"
#include "prism/llm/engine.h"
#include "tests/unit/llm_test_util.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

using testing::argmax;

llm::EngineOptions options() {
  llm::EngineOptions o;
  o.seqlen = 64;
  o.load.report = false;
  return o;
}

// The tiny checkpoints of each architecture.
constexpr const char* kArchitectures[] = {"llama/tiny-f32", "qwen3_5/tiny-bf16-untied",
                                          "lfm2/tiny-bf16-untied"};

// An engine for the tiny checkpoint `dir` on `devices` devices of the CPU (one, or split over
// two).
std::unique_ptr<llm::Engine> engine_on(const char* dir, int devices) {
  setenv("PRISM_CPU_DEVICES", "2", 1);
  llm::EngineOptions o = options();
  if (devices > 1) o.mesh = Mesh({{"model", devices}});
  auto e = std::make_unique<llm::Engine>(std::string(PRISM_TEST_DATA) + "/" + dir,
                                         get_platform("cpu"), o);
  unsetenv("PRISM_CPU_DEVICES");
  return e;
}

// Greedy ids from `logits` on, `steps` of them, feeding each back into `slot`.
std::vector<int32_t> continue_greedy(llm::Engine& e, int slot, std::vector<float> logits,
                                     int steps) {
  std::vector<int32_t> ids;
  for (int i = 0; i < steps; ++i) {
    ids.push_back(argmax(logits));
    logits = e.feed(slot, std::vector<int32_t>{ids.back()});
  }
  return ids;
}

// The windows a prompt's tokens run in: on the CPU (quick compiles) padded by at most a quarter
// or cut into powers of two; elsewhere padded up to the few compiled sizes.
TEST(PrefillWindows, PadLittleWhereCompilingIsQuick) {
  auto plan = [](int64_t n, int64_t room, bool quick) {
    std::vector<int64_t> windows;
    for (int64_t done = 0; done < n;) {
      const int64_t w = llm::prefill_window(n - done, room - done, quick);
      EXPECT_LE(w, room - done);
      windows.push_back(w);
      done += std::min(w, n - done);
    }
    return windows;
  };
  using W = std::vector<int64_t>;
  EXPECT_EQ(plan(1, 4096, true), W{1});
  EXPECT_EQ(plan(8, 4096, true), W{8});
  EXPECT_EQ(plan(9, 4096, true), (W{8, 1}));
  EXPECT_EQ(plan(24, 4096, true), W{32});
  EXPECT_EQ(plan(40, 4096, true), (W{32, 8}));
  EXPECT_EQ(plan(48, 4096, true), W{64});
  EXPECT_EQ(plan(300, 4096, true), (W{256, 32, 16}));
  EXPECT_EQ(plan(2100, 4096, true), (W{1024, 1024, 64}));
  EXPECT_EQ(plan(24, 30, true), W{24});  // 32 would not fit: a window of its own size
  EXPECT_EQ(plan(8, 4096, false), W{16});
  EXPECT_EQ(plan(40, 4096, false), W{64});
  EXPECT_EQ(plan(300, 4096, false), W{512});
  EXPECT_EQ(plan(24, 30, false), W{24});  // no compiled size fits: its own
}

TEST(EngineSlots, InterleavedConversationsMatchEachAlone) {
  for (const char* dir : kArchitectures) {
    SCOPED_TRACE(dir);
    const std::string path = std::string(PRISM_TEST_DATA) + "/" + dir;
    const std::vector<int32_t> a{1, 9906, 11, 1268}, b{1, 40, 1093, 279, 3363, 13};
    llm::Engine alone(path, get_platform("cpu"), options());
    std::vector<int32_t> want_a = continue_greedy(alone, 0, alone.feed(a), 6);
    alone.reset();
    std::vector<int32_t> want_b = continue_greedy(alone, 0, alone.feed(b), 6);

    llm::Engine e(path, get_platform("cpu"), options());
    e.set_slots(3);
    ASSERT_EQ(e.slots(), 3);
    // Slot 2 holds an old conversation first: reset must clear what it left.
    e.feed(2, std::vector<int32_t>{1, 500, 600, 700});
    e.reset(2);
    std::vector<float> la = e.feed(0, a), lb = e.feed(2, b);
    std::vector<int32_t> got_a, got_b;
    for (int i = 0; i < 6; ++i) {  // one token each in turn
      got_a.push_back(argmax(la));
      got_b.push_back(argmax(lb));
      la = e.feed(0, std::vector<int32_t>{got_a.back()});
      lb = e.feed(2, std::vector<int32_t>{got_b.back()});
    }
    EXPECT_EQ(got_a, want_a);
    EXPECT_EQ(got_b, want_b);
    EXPECT_EQ(e.position(0), static_cast<int64_t>(a.size() + 6));
    EXPECT_EQ(e.position(2), static_cast<int64_t>(b.size() + 6));
    EXPECT_EQ(testing::error_of([&] { e.feed(3, a); }), "llm: no slot 3 (3 slots)");
  }
}

// A batched decoding step (one forward pass for every slot's token) gives what the slots give
// one by one: the same greedy ids and logits within 1e-4, on one device and split over two.
TEST(EngineSlots, BatchedDecodeMatchesOneSlotAtATime) {
  const std::vector<std::vector<int32_t>> prompts{
      {1, 9906, 11}, {1, 40, 1093, 279, 3363, 13}, {1, 500}, {1, 77, 88, 99, 1000}};
  for (const char* dir : kArchitectures) {
    for (int devices : {1, 2}) {
      SCOPED_TRACE(std::string(dir) + " on " + std::to_string(devices) + " devices");
      const std::unique_ptr<llm::Engine> engines[] = {engine_on(dir, devices),
                                                      engine_on(dir, devices)};
      llm::Engine &one = *engines[0], &batched = *engines[1];
      one.set_slots(4);
      batched.set_slots(4);
      std::vector<std::vector<float>> la, lb;
      for (int s = 0; s < 4; ++s) {
        la.push_back(one.feed(s, prompts[s]));
        lb.push_back(batched.feed(s, prompts[s]));
      }
      // Slots joining and leaving: all four, then three (slot 1 done), then 0 and 3.
      const std::vector<std::vector<int>> steps{
          {0, 1, 2, 3}, {0, 1, 2, 3}, {3, 0, 2}, {0, 3}, {3, 0}};
      for (const std::vector<int>& slots : steps) {
        std::vector<int32_t> next;
        for (int s : slots) {
          next.push_back(argmax(la[s]));
          ASSERT_EQ(argmax(lb[s]), next.back()) << "slot " << s;
        }
        std::vector<std::vector<float>> got = batched.decode(slots, next);
        for (size_t i = 0; i < slots.size(); ++i) {
          la[slots[i]] = one.feed(slots[i], std::vector<int32_t>{next[i]});
          lb[slots[i]] = got[i];
          double worst = 0;
          for (size_t v = 0; v < got[i].size(); ++v) {
            worst = std::max(worst, double(std::abs(got[i][v] - la[slots[i]][v])));
          }
          EXPECT_LT(worst, 1e-4) << "slot " << slots[i];
          EXPECT_EQ(batched.position(slots[i]), one.position(slots[i]));
        }
      }
      EXPECT_EQ(testing::error_of([&] {
                  batched.decode(std::vector<int>{0, 0}, std::vector<int32_t>{1, 2});
                }),
                "llm: slot 0 twice in a step");
    }
  }
}

// A slot that takes another's conversation start (Engine::share) continues as a slot that
// ran those tokens itself: the same greedy ids, logits within 1e-4, on one device and split
// over two; the source slot goes on unchanged. Models with recurrent or convolution states
// share only a whole conversation; bad calls get one clear error.
TEST(EngineSlots, SharedConversationStartMatchesItsOwn) {
  const std::vector<int32_t> start{1, 9906, 11, 1268, 40, 1093, 279, 3363, 13, 500, 77, 88};
  const std::vector<int32_t> rest{99, 1000, 42};
  for (const char* dir : kArchitectures) {
    for (int devices : {1, 2}) {
      SCOPED_TRACE(std::string(dir) + " on " + std::to_string(devices) + " devices");
      const std::unique_ptr<llm::Engine> engine = engine_on(dir, devices);
      llm::Engine& e = *engine;
      e.set_slots(3);
      const bool kv_only = std::string(dir).starts_with("llama");
      // Slot 0 runs the start and the rest; slot 2 holds another conversation first.
      e.feed(0, start);
      e.feed(2, std::vector<int32_t>{1, 500, 600, 700, 800});
      EXPECT_FALSE(e.can_share(0, 0));
      EXPECT_FALSE(e.can_share(0, static_cast<int64_t>(start.size()) + 1));
      EXPECT_EQ(e.can_share(0, 5), kv_only);
      ASSERT_TRUE(e.can_share(0, static_cast<int64_t>(start.size())));
      // Where the model can, from part of the conversation; else all of it.
      const size_t shared = kv_only ? 7 : start.size();
      e.share(0, 2, static_cast<int64_t>(shared));
      EXPECT_EQ(e.position(2), static_cast<int64_t>(shared));
      std::vector<int32_t> tail(start.begin() + static_cast<std::ptrdiff_t>(shared), start.end());
      tail.insert(tail.end(), rest.begin(), rest.end());
      std::vector<float> got = e.feed(2, tail);
      std::vector<float> want = e.feed(0, rest);
      double worst = 0;
      for (size_t v = 0; v < got.size(); ++v)
        worst = std::max(worst, double(std::abs(got[v] - want[v])));
      EXPECT_LT(worst, 1e-4);
      EXPECT_EQ(continue_greedy(e, 2, got, 5), continue_greedy(e, 0, want, 5));
      if (!kv_only) {
        EXPECT_EQ(testing::error_of([&] { e.share(0, 1, 5); }),
                  "llm: slot 0 cannot share its first 5 of 20 tokens: its recurrent states "
                  "hold the end of its conversation");
      }
      EXPECT_EQ(testing::error_of([&] { e.share(0, 0, 1); }),
                "llm: cannot share slot 0's conversation with slot 0 (3 slots)");
      EXPECT_EQ(testing::error_of([&] { e.share(1, 0, 1); }),
                "llm: slot 1 cannot share its first 1 tokens: it holds 0");
    }
  }
}

// The copy Engine::share compiles runs on the other platforms too (OpenCL, the XLA CPU
// plugin, where this machine has them): Llama's slot that took another's start continues as
// the one that ran it.
TEST(EngineSlots, SharedStartOnEveryPlatform) {
  const std::vector<int32_t> start{1, 9906, 11, 1268, 40, 1093, 279, 3363, 13, 500, 77, 88};
  const std::vector<int32_t> tail{3363, 13, 500, 77, 88, 99, 1000, 42}, rest{99, 1000, 42};
  int ran = 0;
  for (const PlatformStatus& s : platform_statuses()) {
    if (!s.available || (s.name != "opencl" && s.name != "xla-cpu")) continue;
    SCOPED_TRACE(s.name);
    ++ran;
    llm::Engine e(std::string(PRISM_TEST_DATA) + "/llama/tiny-f32", get_platform(s.name),
                  options());
    e.set_slots(2);
    e.feed(0, start);
    e.share(0, 1, static_cast<int64_t>(start.size() - 5));
    std::vector<float> got = e.feed(1, tail), want = e.feed(0, rest);
    double worst = 0;
    for (size_t v = 0; v < got.size(); ++v) {
      worst = std::max(worst, double(std::abs(got[v] - want[v])));
    }
    EXPECT_LT(worst, 1e-4);
  }
  if (ran == 0) GTEST_SKIP() << "neither OpenCL nor the XLA CPU plugin here";
}

}  // namespace
}  // namespace prism
