#include "prism/backends/cpu/thread_pool.h"

#include <algorithm>
#include <cstdlib>

namespace prism::cpu {
namespace {

std::pair<int64_t, int64_t> chunk(int64_t n, int chunks, int i) {
  int64_t base = n / chunks, extra = n % chunks;
  int64_t begin = i * base + std::min<int64_t>(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

// Set on pool workers: a kernel that calls parallel_for from inside a chunk runs it serially.
thread_local bool t_in_pool = false;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) {
    const char* env = std::getenv("PRISM_THREADS");
    threads = env ? std::atoi(env) : 0;
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int chunks = static_cast<int>(std::min<int64_t>(size(), std::max<int64_t>(1, n / grain)));
  if (chunks <= 1 || t_in_pool) {
    fn(0, n);
    return;
  }
  std::lock_guard call(call_mutex_);
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    chunks_ = chunks;
    pending_ = chunks - 1;
    ++generation_;
  }
  wake_.notify_all();
  auto [b, e] = chunk(n, chunks, 0);
  t_in_pool = true;
  fn(b, e);
  t_in_pool = false;
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::work(int index) {
  t_in_pool = true;
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= chunks_) continue;
    const auto* fn = job_;
    auto [b, e] = chunk(job_n_, chunks_, index);
    lock.unlock();
    (*fn)(b, e);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace prism::cpu
