// Byte-pair encoding, the model of tokenizer.json ("type": "BPE"): a vocabulary and ranked merges.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "prism/llm/tokenizer_pipeline.h"

namespace prism::llm {

// Hashes std::string and std::string_view alike, so lookups by view allocate nothing.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringToId = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  BpeModel(const nlohmann::json& model, const pipeline::JsonPath& where);

  // Appends the ids of one pre-tokenized piece to `out`.
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr for ids the vocabulary does not have.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id in the vocabulary.
  size_t vocab_size() const { return id_to_token_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void apply_merges(std::vector<int32_t>& symbols) const;

  StringToId vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_known_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;

  // Pieces repeat a lot in real text (" the", " of"): remember their ids. Threads encoding
  // with one tokenizer share it, so it is split by the piece's hash into shards with a lock
  // each (one lock for all made two threads slower than one), each on its own cache lines.
  struct alignas(64) CacheShard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> pieces;
  };
  static constexpr size_t kCacheShards = 64;
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace prism::llm
