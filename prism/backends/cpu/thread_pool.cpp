#include "prism/backends/cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>

#include "prism/core/spin.h"

namespace prism::cpu {
namespace {

// Set while a thread runs a chunk: nested parallel_for calls run serially.
thread_local bool t_in_chunk = false;

}  // namespace

struct ThreadPool::Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t n = 0;
  int chunks = 0;
  std::atomic<int> next{0};          // the next chunk to claim
  std::atomic<int> finished{0};      // chunks done
  std::atomic<bool> waiting{false};  // the caller sleeps on `done` (after its spin ran out)
  std::mutex mutex;                  // for `done` and `error`
  std::condition_variable done;
  std::exception_ptr error;
};

namespace {

// Waits for done(): spins (kSpin), then gives the core away between looks. For waits that end
// as soon as another thread runs a few instructions, unless it was preempted.
template <typename Done>
void spin_then_yield(Done done) {
  if (spin_until(done)) return;
  while (!done()) std::this_thread::yield();
}

}  // namespace

ThreadPool::ThreadPool(int threads, std::vector<int> cpus) {
  if (threads <= 0) {
    const char* env = std::getenv("PRISM_THREADS");
    threads = env ? std::atoi(env) : 0;
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) {
    workers_.emplace_back([this, cpus] {
      if (!cpus.empty()) {  // advice: a failure leaves the thread where the system puts it
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c : cpus) CPU_SET(c, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
      }
      work();
    });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  mutex_.lock();  // as in parallel_for
  mutex_.unlock();
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(Job& job) {
  t_in_chunk = true;
  for (int c = job.next++; c < job.chunks; c = job.next++) {
    int64_t base = job.n / job.chunks, extra = job.n % job.chunks;
    int64_t begin = c * base + std::min<int64_t>(c, extra);
    int64_t end = begin + base + (c < extra ? 1 : 0);
    try {
      (*job.fn)(begin, end);
    } catch (...) {
      std::lock_guard lock(job.mutex);
      if (!job.error) job.error = std::current_exception();
    }
    // The caller sets `waiting` before it looks at `finished` a last time and sleeps; the last
    // chunk's thread counts itself before it looks at `waiting`: one of them sees the other.
    if (job.finished.fetch_add(1) + 1 == job.chunks && job.waiting.load()) {
      std::lock_guard lock(job.mutex);
      job.done.notify_all();
    }
  }
  t_in_chunk = false;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  // Four chunks a thread: enough slack for a late worker, few enough to stay cheap.
  int64_t most = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
  run(n, static_cast<int>(std::min<int64_t>(4 * size(), most)), fn);
}

void ThreadPool::parallel_for_each(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  run(n, static_cast<int>(std::min<int64_t>(n, std::numeric_limits<int>::max())), fn);
}

void ThreadPool::run(int64_t n, int chunks, const std::function<void(int64_t, int64_t)>& fn) {
  if (chunks <= 1 || size() == 1 || t_in_chunk) {
    fn(0, n);
    return;
  }
  std::lock_guard call(call_mutex_);
  if (++jobs_ % 64 == 0) {
    if (std::optional<double> others = sharing_.look()) {
      shared_.store(*others >= kSharedCores, std::memory_order_relaxed);
    }
  }
  Job job;
  job.fn = &fn;
  job.n = n;
  job.chunks = chunks;
  job_.store(&job);
  generation_.fetch_add(1);
  // A worker counts itself a sleeper before it looks at the generation a last time: if it
  // was not counted here, it sees this job's.
  if (sleepers_.load() > 0) {
    // One between its last look and its wait holds mutex_: passing through it first puts the
    // notification after the wait.
    mutex_.lock();
    mutex_.unlock();
    wake_.notify_all();
  }
  run_chunks(job);
  const auto all_done = [&] { return job.finished.load() == job.chunks; };
  if (!spin_until(all_done)) {
    std::unique_lock lock(job.mutex);
    job.waiting.store(true);
    job.done.wait(lock, all_done);
  }
  // No worker may still hold a pointer to `job` when it goes out of scope: one that counts
  // itself inside after this looks at job_ after it is cleared.
  job_.store(nullptr);
  spin_then_yield([&] { return inside_.load() == 0; });
  if (job.error) std::rethrow_exception(job.error);
}

void ThreadPool::parallel_for_tapered(int64_t n, int64_t grain,
                                      const std::function<void(int64_t, int64_t)>& fn) {
  grain = std::max<int64_t>(grain, 1);
  const int threads = size();
  constexpr int kRounds = 4;  // weights 8, 4, 2, 1: the pool's four chunks a thread
  if (threads == 1 || t_in_chunk || n < 2 * grain * threads * kRounds) {
    parallel_for(n, grain, fn);
    return;
  }
  std::vector<int64_t> bounds{0};
  const int64_t total = threads * ((1 << kRounds) - 1);  // in units of the smallest chunk
  int64_t units = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (int t = 0; t < threads; ++t) {
      units += int64_t{1} << (kRounds - 1 - round);
      int64_t end = n * units / total / grain * grain;
      bounds.push_back(std::max(end, bounds.back()));
    }
  }
  bounds.back() = n;
  parallel_for(static_cast<int64_t>(bounds.size()) - 1, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      if (bounds[c] < bounds[c + 1]) fn(bounds[c], bounds[c + 1]);
    }
  });
}

void ThreadPool::work() {
  uint64_t seen = 0;
  for (;;) {
    const auto new_job = [&] { return generation_.load() != seen; };
    if (!spin_until(new_job, shared_.load(std::memory_order_relaxed) ? kSharedSpin : kSpin)) {
      std::unique_lock lock(mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, new_job);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_.load();
    inside_.fetch_add(1);
    if (Job* job = job_.load()) run_chunks(*job);  // claims nothing once all chunks are taken
    inside_.fetch_sub(1);
  }
}

}  // namespace prism::cpu
