// Waiting by spinning, briefly, before sleeping: for threads that hand each other work many
// times a millisecond (a decode step's kernels, its collectives), where a sleep's wake-up
// costs more than the wait itself.
#pragma once

#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace prism {

// How long a thread spins for what it waits on before it sleeps: longer than the gap between
// two kernels of a decode step, far shorter than a scheduler's time slice.
inline constexpr auto kSpin = std::chrono::microseconds(100);

// Spins until done() or kSpin has passed; returns done().
template <typename Done>
bool spin_until(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (done()) return true;
#if defined(__x86_64__)
    _mm_pause();
#endif
    if (i % 64 == 63 && std::chrono::steady_clock::now() > until) return done();
  }
}

}  // namespace prism
