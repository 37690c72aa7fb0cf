#include "prism/backends/cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>

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
  std::atomic<int> next{0};      // the next chunk to claim
  std::atomic<int> finished{0};  // chunks done
  std::mutex mutex;
  std::condition_variable done;
  std::exception_ptr error;
  int active = 0;  // workers inside run_chunks (guarded by the pool's mutex)
};

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
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
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
    if (++job.finished == job.chunks) {
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
  int chunks = static_cast<int>(std::min<int64_t>(4 * size(), most));
  if (chunks <= 1 || size() == 1 || t_in_chunk) {
    fn(0, n);
    return;
  }
  std::lock_guard call(call_mutex_);
  Job job;
  job.fn = &fn;
  job.n = n;
  job.chunks = chunks;
  {
    std::lock_guard lock(mutex_);
    job_ = &job;
    ++generation_;
  }
  wake_.notify_all();
  run_chunks(job);
  if (!spin_until([&] { return job.finished == job.chunks; })) {
    std::unique_lock lock(job.mutex);
    job.done.wait(lock, [&] { return job.finished == job.chunks; });
  }
  {
    // No worker may still hold a pointer to `job` when it goes out of scope.
    std::unique_lock lock(mutex_);
    job_ = nullptr;
    idle_.wait(lock, [&] { return job.active == 0; });
  }
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
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    Job* job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || (generation_ != seen && job_); });
      if (stop_) return;
      seen = generation_;
      job = job_;
      // Joined under the lock: parallel_for clears job_ and waits for active == 0 under it
      // before `job` dies.
      if (job->next >= job->chunks) continue;
      ++job->active;
    }
    run_chunks(*job);
    std::lock_guard lock(mutex_);
    if (--job->active == 0) idle_.notify_all();
  }
}

}  // namespace prism::cpu
