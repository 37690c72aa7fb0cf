// The CPU backend's thread pool: every index is visited exactly once, whatever the chunking.
#include "prism/backends/cpu/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "prism/backends/cpu/core_sharing.h"
#include "prism/core/spin.h"

namespace prism::cpu {
namespace {

// The chunks a call hands out, sorted.
template <typename Call>
std::vector<std::pair<int64_t, int64_t>> chunks_of(Call call) {
  std::mutex mutex;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  call([&](int64_t begin, int64_t end) {
    std::lock_guard lock(mutex);
    chunks.emplace_back(begin, end);
  });
  std::sort(chunks.begin(), chunks.end());
  return chunks;
}

// The chunks tile [0, n) without gaps, overlaps or empty chunks.
void expect_tiling(const std::vector<std::pair<int64_t, int64_t>>& chunks, int64_t n) {
  int64_t at = 0;
  for (auto [begin, end] : chunks) {
    EXPECT_EQ(begin, at);
    EXPECT_LT(begin, end);
    at = end;
  }
  EXPECT_EQ(at, n);
}

TEST(ThreadPool, ChunksCoverTheRangeOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 64, 1000, 4096}) {
      expect_tiling(chunks_of([&](auto fn) { pool.parallel_for(n, 16, fn); }), n);
    }
  }
}

TEST(ThreadPool, EachItemIsAChunkOfItsOwn) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 18, 64}) {
      const auto chunks = chunks_of([&](auto fn) { pool.parallel_for_each(n, fn); });
      expect_tiling(chunks, n);
      // One thread runs the whole range at once; several claim the items one by one.
      EXPECT_EQ(chunks.size(), threads == 1 ? size_t{1} : static_cast<size_t>(n));
    }
  }
}

TEST(ThreadPool, TaperedChunksShrinkAndCoverTheRangeOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 100, 512, 2048, 8192, 128256, 1000003}) {
      for (int64_t grain : {1, 16}) {
        auto chunks = chunks_of([&](auto fn) { pool.parallel_for_tapered(n, grain, fn); });
        expect_tiling(chunks, n);
        if (threads == 1 || n < 2 * grain * threads * 4) continue;
        // Multiples of the grain but the last; the first at least four times the smallest.
        int64_t smallest = n, first = chunks.front().second - chunks.front().first;
        for (size_t i = 0; i + 1 < chunks.size(); ++i) {
          int64_t size = chunks[i].second - chunks[i].first;
          EXPECT_EQ(chunks[i].first % grain, 0);
          smallest = std::min(smallest, size);
        }
        EXPECT_GE(first, 4 * smallest) << threads << " threads, n " << n << ", grain " << grain;
      }
    }
  }
}

TEST(ThreadPool, NestedCallsRunSeriallyAndErrorsReachTheCaller) {
  ThreadPool pool(2);
  std::mutex mutex;
  int64_t visited = 0;
  pool.parallel_for(4, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      pool.parallel_for_tapered(10000, 16, [&](int64_t i0, int64_t i1) {
        std::lock_guard lock(mutex);
        visited += i1 - i0;
      });
    }
  });
  EXPECT_EQ(visited, 4 * 10000);
  EXPECT_THROW(pool.parallel_for_tapered(1 << 20, 16,
                                         [](int64_t begin, int64_t) {
                                           if (begin == 0) throw std::runtime_error("first chunk");
                                         }),
               std::runtime_error);
}

// Jobs far shorter than a wake-up, one after the other, as a decode step hands them out: each
// index once, with more threads than cores (workers preempted at any point) too.
TEST(ThreadPool, BackToBackShortJobs) {
  for (int threads : {2, 3, 8}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> visits(64);
    for (int job = 0; job < 20000; ++job) {
      pool.parallel_for(64, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) visits[i].fetch_add(1);
      });
    }
    for (auto& v : visits) EXPECT_EQ(v.load(), 20000) << threads << " threads";
  }
}

// Workers that went to sleep between jobs take part in the next: each of its two chunks waits
// for the other to start, which only two threads running at once get past (a chunk gives up
// after a long while rather than hang).
TEST(ThreadPool, SleepingWorkersWakeForTheNextJob) {
  ThreadPool pool(2);
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(kSpin * 5);  // the worker has stopped spinning
    std::atomic<int> started = 0;
    std::atomic<bool> waited_in_vain = false;
    std::thread::id ran_on[2];
    pool.parallel_for(2, 1, [&](int64_t begin, int64_t) {
      ran_on[begin] = std::this_thread::get_id();
      started.fetch_add(1);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (started.load() < 2) {
        if (std::chrono::steady_clock::now() > until) {
          waited_in_vain.store(true);
          return;
        }
        std::this_thread::yield();
      }
    });
    ASSERT_FALSE(waited_in_vain.load()) << "round " << round;
    EXPECT_NE(ran_on[0], ran_on[1]);
  }
}

// Several threads handing jobs to one pool: they take turns, every index once.
TEST(ThreadPool, CallersFromSeveralThreads) {
  ThreadPool pool(2);
  std::atomic<int64_t> visited = 0;
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int job = 0; job < 3000; ++job) {
        pool.parallel_for(16, 1, [&](int64_t begin, int64_t end) { visited += end - begin; });
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(visited.load(), 3 * 3000 * 16);
}

// /proc/stat's per-CPU lines: the busy ticks are user, nice, system, irq and softirq; the
// total line, idle, iowait and steal do not count; a CPU without a line is no answer.
TEST(CoreSharing, CountsTheBusyTicksOfTheCpusAsked) {
  const std::string stat =
      "cpu  900 9 90 9000 90 9 9 9 0 0\n"
      "cpu0 100 1 10 5000 50 2 3 40 0 0\n"
      "cpu1 200 2 20 4000 40 4 6 50 0 0\n"
      "cpu3 7 0 0 1 1 0 0 0 0 0\n"
      "intr 12345 0 0\n"
      "ctxt 999\n";
  EXPECT_EQ(busy_ticks(stat, {0}), 116);
  EXPECT_EQ(busy_ticks(stat, {0, 1}), 116 + 232);
  EXPECT_EQ(busy_ticks(stat, {3}), 7);
  EXPECT_EQ(busy_ticks(stat, {2}), std::nullopt);
  EXPECT_EQ(busy_ticks("cpu0 1 2\n", {0}), std::nullopt);
}

// A child process that spins, pinned to the last CPU this process may run on, for as long as
// it lives (as prism-bench's contention line makes).
class SpinningChild {
 public:
  SpinningChild() {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    sched_getaffinity(0, sizeof allowed, &allowed);
    int cpu = 0;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpu = c;
    pid_ = fork();
    if (pid_ == 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      sched_setaffinity(0, sizeof one, &one);
      volatile uint64_t x = 1;
      for (;;) x = x * 6364136223846793005u + 1442695040888963407u;
    }
  }
  ~SpinningChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  SpinningChild(const SpinningChild&) = delete;
  SpinningChild& operator=(const SpinningChild&) = delete;

 private:
  pid_t pid_ = -1;
};

// Another process spinning on one of this process's CPUs takes a good share of a CPU (at
// least a third, whatever else the machine runs), and the pool, handing out jobs meanwhile,
// sees its cores as shared.
TEST(CoreSharing, SeesAnotherProcessOnTheCpus) {
  CoreSharing sharing;
  ThreadPool pool(2);
  SpinningChild child;
  ASSERT_EQ(sharing.look(), std::nullopt);  // the first look is the baseline
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  std::atomic<int64_t> visited = 0;
  while (std::chrono::steady_clock::now() < until) {
    pool.parallel_for(16, 1, [&](int64_t begin, int64_t end) { visited += end - begin; });
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::optional<double> others = sharing.look();
  ASSERT_TRUE(others.has_value());
  EXPECT_GE(*others, 0.33);
  EXPECT_EQ(sharing.look(std::chrono::milliseconds(1000)), std::nullopt);  // too soon
  EXPECT_TRUE(pool.shared());
}

}  // namespace
}  // namespace prism::cpu
