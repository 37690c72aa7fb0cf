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

// How long where the thread shares its core with another process: a thread that spins there
// spends its share of the core on nothing, and one that sleeps is woken ahead of the other
// process (the scheduler favours a thread that slept over one that has been running).
inline constexpr auto kSharedSpin = std::chrono::microseconds(10);

// Spins until done() or `spin` has passed; returns done().
template <typename Done>
bool spin_until(Done done, std::chrono::microseconds spin = kSpin) {
  const auto until = std::chrono::steady_clock::now() + spin;
  for (int i = 0;; ++i) {
    if (done()) return true;
#if defined(__x86_64__)
    _mm_pause();
#endif
    if (i % 64 == 63 && std::chrono::steady_clock::now() > until) return done();
  }
}

}  // namespace prism
