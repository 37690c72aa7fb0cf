// Neural-network building blocks on tagged tensors. The composites (softmax, norms, rope,
// attention) are single IR nodes that a backend may run as one kernel; the compiler
// decomposes them into primitives for backends that cannot (prism/compiler/decompose.cpp).
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "prism/tensor/tensor.h"

namespace prism::nn {

// cos and sin tables for rotary embeddings: positions (integer, any tags) times each inverse
// frequency, as f32 tensors with the tags of `positions` plus `half` of size inv_freq.size().
std::pair<Tensor, Tensor> rope_tables(const Tensor& positions, const std::vector<double>& inv_freq,
                                      Tag half = "hd");
// The standard inverse frequencies theta^(-2i/dim), i < dim/2.
std::vector<double> rope_inv_freq(int64_t dim, double theta);

// Rotates the `dim` tag of x by (cos, sin), which have `dim` of half its size (and any of x's
// other tags). rotate-half pairs i with i + d/2 (Llama in Hugging Face layout); interleaved
// pairs 2i with 2i + 1 (the original GPT-J / Meta layout).
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, Tag dim = "hd",
            bool interleaved = false);

struct AttentionOptions {
  Tag head = "h";    // query heads in q; kv heads in k and v (grouped-query when fewer)
  Tag query = "q";   // query positions in q
  Tag key = "k";     // key positions in k and v
  Tag dim = "hd";    // head dim, contracted for scores; v's may differ
  double scale = 0;  // 0: 1/sqrt(head dim)
  bool causal = false;
  int64_t window = 0;  // sliding window (keys per query, itself included), 0 = none
  // Keys a query may see: a bool mask (true = attend) or an additive float mask, with tags
  // among the batch tags, head, query and key.
  std::optional<Tensor> mask;
  // Integer scalar: the position of the first query among the keys (a KV cache's fill level).
  // Without it, queries are the last positions (offset = keys - queries).
  std::optional<Tensor> offset;
};
// softmax(q.k * scale + mask) . v. Every tag of q besides head/query/dim is a batch tag shared
// with k and v. Result: q's tags, with v's head dim.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o);

// The gated delta rule (Gated DeltaNet, the linear attention of Qwen 3.5 and Qwen3-Next):
// for each value head a state S {dk, dv} that every token decays and then corrects,
//   S <- exp(g) S;   S <- S + k (beta (v - S^T k))^T;   out = S^T q,
// over the sequence from `state`. q and k have key heads, v / g / beta / state value heads;
// value head h reads key head h / (value heads / key heads). No normalization or scaling is
// applied to q or k here. `chunk` picks the algorithm: 0 runs the recurrence token by token
// (decode); C > 0 runs the chunked form over blocks of C tokens (prefill), equal up to
// rounding. A token with g = 0 and beta = 0 leaves the state as it is (padding).
struct GatedDeltaRuleOptions {
  Tag head = "h";        // key heads in q, k; value heads in v, g, beta, state
  Tag seq = "s";         // tokens in q, k, v, g, beta
  Tag key_dim = "dk";    // in q, k and the state's rows
  Tag value_dim = "dv";  // in v and the state's columns
  int64_t chunk = 64;
};
struct GatedDeltaRuleResult {
  Tensor out;    // v's tags and dtype: {batch..., h, s, dv} in v's order
  Tensor state;  // the state after the last token: state's tags and dtype
};
// q, k {batch..., hk, s, dk}, v {batch..., h, s, dv}, g, beta {batch..., h, s},
// state {batch..., h, dk, dv}; the batch tags are any others, shared by all. Computes in the
// state's dtype (f32 for half inputs is the usual choice).
GatedDeltaRuleResult gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& g, const Tensor& beta, const Tensor& state,
                                      const GatedDeltaRuleOptions& o = {});

// Causal short convolution (LFM 2's): a depthwise convolution along `seq` over the inputs
// before each position, the last (taps - 1) of which come from a carried state.
//   y[t, c] = sum_j weight[c, j] * w[t + j, c],  w = concat(state, x) along seq,
// so weight's last tap multiplies the current input. x: `seq`, `channel` and any batch tags;
// state: x's tags, `seq` of size taps - 1 (the inputs before x's first, oldest first); weight:
// {channel, tap}. Returns y (x's tags) and the next state: the taps - 1 inputs ending at index
// `last` of x (so that padding after `last` never enters it), or at x's end without `last`.
struct ShortConvResult {
  Tensor y;
  Tensor state;
};
ShortConvResult short_conv(const Tensor& x, const Tensor& state, const Tensor& weight,
                           const std::optional<Tensor>& last = std::nullopt, Tag seq = "s",
                           Tag channel = "d", Tag tap = "tap");

}  // namespace prism::nn
