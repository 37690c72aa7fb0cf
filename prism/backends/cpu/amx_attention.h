// The two products of a prompt's attention in bf16 on AMX tiles (kernels_attention.cpp takes
// them for blocks of 16 or more query rows where the CPU has AMX-BF16): the scores of a block's
// query rows against a chunk of keys, and the weighted sums of the chunk's values. The online
// softmax between them stays in f32 vector code.
//
// The scores are S = Q . K^T, Q the block's rows as the tiles' first operand (rows of D values,
// as they are), K^T the second: the chunk's keys regrouped once per chunk into pairs of d
// ([D / 2][keys][2], amx_pack_keys). The sums are O += P . V, V the chunk's values regrouped
// into pairs of keys ([keys / 2][E][2], amx_pack_values) and P the softmax's weights as the sum
// of two bf16 values, hi and lo (16 bits of mantissa, twice the tile products): rounded to one
// bf16, as flash attention's bf16 kernels round them, the weights flipped the first greedy id
// of the Llama-1B-shaped benchmark checkpoint after a 6-token prompt (a near tie) away from the
// one llama.cpp, PyTorch and prism's vector path agree on, and the peers fed prism's ids
// then disagreed with its next id at 2-3 of 16 steps instead of 0-1. Sums in f32.
#pragma once

#include <cstdint>
#include <span>

namespace prism::cpu {

// Whether the functions below can run: amx_gemm_available() (AMX-BF16 and AVX-512 BF16).
bool amx_attention_available();

// kt[(p * ld + j) * 2 + t] = k[j * D + 2p + t] for j < n keys (D values each, bf16), zeros for
// n <= j < ld; ld a multiple of 32.
void amx_pack_keys(const uint16_t* k, int64_t n, int64_t D, int64_t ld, uint16_t* kt);

// vp[(p * E + e) * 2 + t] = v[(2p + t) * E + e] for 2p + t < n (E values a key, bf16), zeros up
// to `keys` (a multiple of 32).
void amx_pack_values(const uint16_t* v, int64_t n, int64_t E, int64_t keys, uint16_t* vp);

// s[r * cols + j] = q_r . k_j (f32) for r < rows (a multiple of 16; q's rows D values apart, D
// a multiple of 32) and j < cols (a multiple of 64, at most ld), kt = amx_pack_keys(.., ld, ..).
void amx_scores(const uint16_t* q, int64_t rows, int64_t D, const uint16_t* kt, int64_t ld,
                int64_t cols, float* s);

// The online softmax of a chunk's scores, as the weights amx_weighted_sums multiplies: row r
// (of rows) of s (amx_scores' rows, ld apart), scaled by `scale`, sees the chunk's keys in
// [first[r], last[r]). With m the larger of max[r] and the row's largest visible score, each
// visible key's weight is exp(score - m) (0 below e^-87), the others' 0; max[r] becomes m,
// alpha[r] the factor the row's earlier sums take (exp(before - m); 1 while it has seen
// nothing), sum[r] = sum[r] * alpha[r] + the weights. The weights go to p as the sum of two
// bf16 values, each rounded to nearest even: hi, and lo the rest; rows of `keys` (a multiple of
// 16, at most ld), lo's after hi's. The same values as kernels_attention.cpp's vector softmax
// (its exp's steps), in one pass over the scores to find m and one to write the weights.
void amx_softmax_weights(const float* s, int64_t ld, int64_t rows, const int64_t* first,
                         const int64_t* last, float scale, int64_t keys, float* max, float* sum,
                         float* alpha, uint16_t* p);

// o[r * E + e] += sum_j (hi + lo)_rj * v_j[e] for r < rows (a multiple of 16), j < keys (a
// multiple of 32), e < E (a multiple of 16), hi and lo as amx_softmax_weights writes them to
// p; vp = amx_pack_values(.., keys, ..).
void amx_weighted_sums(const uint16_t* p, int64_t rows, const uint16_t* vp, int64_t E, int64_t keys,
                       float* o);

// Rows of memory a decoding step reads later, prefetched while it computes: as it takes keys
// 16j to 16j + 15, rows 16j to 16j + 15 of the `rows` rows of `bytes` at `at`, into L1 (`l1`)
// or L2.
struct DecodeAhead {
  const char* at = nullptr;
  int64_t rows = 0, bytes = 0;
  bool l1 = false;
};
inline void prefetch_ahead(std::span<const DecodeAhead> ahead, int64_t j) {
  for (const DecodeAhead& a : ahead) {
    if (j >= a.rows) continue;
    const char* from = a.at + j * a.bytes;
    const int64_t bytes = (a.rows - j < 16 ? a.rows - j : 16) * a.bytes;
    for (int64_t l = 0; l < bytes; l += 64) {
      if (a.l1) {
        __builtin_prefetch(from + l, 0, 3);
      } else {
        __builtin_prefetch(from + l, 0, 2);
      }
    }
  }
}

// A decoding step's scores on tiles: s[r * ldk + j] = scale * (q[r] . k_j) for r < rows (at
// most 4: a key head's query heads) and the first n rounded down to 16 keys (D values each, D
// apart, as a KV cache keeps them), which it returns; 0, doing nothing, where rows > 4 or D is
// not a multiple of 32 or above 32 * kAmxDecodeMaxSteps. The keys are the tiles' first operand
// as they are kept, 16 keys by 32 values of d; the rows, regrouped once into pairs of d, the
// second, 4 columns. Prefetches `ahead` as it goes.
inline constexpr int64_t kAmxDecodeMaxSteps = 8;
int64_t amx_decode_scores(const uint16_t* const* q, int rows, int64_t D, const uint16_t* k,
                          int64_t n, float scale, float* s, int64_t ldk,
                          std::span<const DecodeAhead> ahead);

}  // namespace prism::cpu
