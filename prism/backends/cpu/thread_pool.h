// One pool of worker threads for the CPU kernels. It degrades gracefully when the machine is
// busy: work is cut into more chunks than threads and claimed dynamically, so a worker that
// is not scheduled in time leaves its chunks to the threads that are, instead of making
// everyone wait; and workers spin only briefly (kSpin) for the next job before sleeping on a
// condition variable, so back-to-back kernels (a decode step runs hundreds) skip the wake-up
// latency while a busy machine loses at most that much of a core to the spin.
//
// On a machine whose cores other processes share, workers spin only briefly (kSharedSpin) for
// the next job: a worker that sleeps between kernels is run again ahead of the other process
// as soon as it is woken, where one that spun has used up its share of the core. The caller
// looks at what the others take (core_sharing.h) every 64 jobs, at most every 100 ms. A Llama
// 1B-shaped Q4_0 decode with another process spinning on one of the 2 cores of an Intel Xeon
// (pinned there or not) ran at 20.0-20.6 tok/s with 100 us spins, 23.3-23.8 so (38.2-39.3
// alone, as before; always spinning 10 us would cost 2-4 % there, a wake-up for each kernel
// whose gap outlasts the spin).
//
// Handing out a job and waiting for it take no lock and make no system call while the threads
// spin: a job is published through atomics, and the caller sleeps, or wakes sleeping workers,
// only after a spin has run out. (With a mutex around the job, a spinning worker woke into a
// lock its caller still held, and every kernel of a decode step made about one futex call:
// 40,000 for 128 tokens of the 1B model.)
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "prism/backends/cpu/core_sharing.h"

namespace prism::cpu {

class ThreadPool {
 public:
  // 0 threads: PRISM_THREADS, else the number of cores. `cpus`, where given: the CPUs the
  // workers may run on (a device of a CPU mesh keeps its threads on its own cores).
  explicit ThreadPool(int threads = 0, std::vector<int> cpus = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Whether the workers spin briefly, as last seen: other processes took at least
  // kSharedCores of this process's CPUs.
  bool shared() const { return shared_.load(std::memory_order_relaxed); }
  static constexpr double kSharedCores = 0.5;

  // Runs fn(begin, end) over contiguous chunks covering [0, n), each of at least `grain` items,
  // on the pool and the calling thread; returns when all are done. Called from inside a chunk
  // it runs serially. An exception thrown by fn is rethrown here.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // The same with each item a chunk of its own, claimed one at a time: for a few items of much
  // work each (a product's slices of columns), where four chunks a thread would leave one
  // thread a chunk of two or three items while the others wait.
  void parallel_for_each(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  // The same with chunks that shrink: a round of one chunk per thread holding 8/15 of [0, n),
  // then rounds of 4/15, 2/15 and 1/15, each chunk a multiple of `grain` where it can be. For
  // kernels that stream through memory: the first chunks are long (few restarts of the
  // hardware prefetchers), the last short, so the threads finish close together. Decoding's
  // matrix-vector products ran about 2.5 % faster than with four equal chunks per thread.
  void parallel_for_tapered(int64_t n, int64_t grain,
                            const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Job;
  void run(int64_t n, int chunks, const std::function<void(int64_t, int64_t)>& fn);
  void work();
  static void run_chunks(Job& job);

  std::vector<std::thread> workers_;
  std::atomic<Job*> job_ = nullptr;       // the job being handed out; null between jobs
  std::atomic<uint64_t> generation_ = 0;  // one more for every job (and for the stop)
  std::atomic<int> inside_ = 0;           // workers that may hold a pointer to a job
  std::atomic<int> sleepers_ = 0;         // workers asleep on wake_ (or about to be)
  std::atomic<bool> stop_ = false;
  std::mutex mutex_;  // for wake_ only
  std::condition_variable wake_;
  std::mutex call_mutex_;  // one parallel_for at a time
  // Under call_mutex_: jobs handed out, and what other processes take of the CPUs.
  uint64_t jobs_ = 0;
  CoreSharing sharing_;
  std::atomic<bool> shared_ = false;  // workers spin kSharedSpin instead of kSpin
};

}  // namespace prism::cpu
