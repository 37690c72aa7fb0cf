// Decode and prefill steps of any causal LM on uninitialized weights (the speed does not
// depend on their values), on the platform given with --platform, next to the bound memory
// bandwidth puts on decoding: every token reads every weight once and reads and writes every
// state that is not a KV cache, so tokens/s <= bandwidth / (weight bytes + 2 x state bytes).
// On the CPU the bandwidth is the best of several reads of 1 GiB (the way decoding reads its
// weights) taken during the run; on a device, its nominal bandwidth.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "prism/models/causal_lm.h"

namespace prism::bench {

// Prints one table for `title`: for bf16 and f32 compute, a prefill step of `window` tokens and
// a decode step, with a cache of `seqlen` positions.
void llm_steps_bench(const std::string& title,
                     const std::function<std::unique_ptr<models::CausalLM>(DType)>& make,
                     int64_t window = 512, int64_t seqlen = 1024);

}  // namespace prism::bench
