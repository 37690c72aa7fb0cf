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

// A BPE model's vocabulary (each token's text and id) and its merges (the two halves, by rank),
// as views of text that outlives the model's construction: a parsed tokenizer.json, or a GGUF
// file's arrays (which then need no JSON document of their own).
struct BpeTables {
  std::vector<std::pair<std::string_view, int32_t>> vocab;
  std::vector<std::pair<std::string_view, std::string_view>> merges;
};

// A merge as older tokenizer files spell it, "left right": its halves, or nothing when the text
// is not two parts with one space between them.
std::optional<std::pair<std::string_view, std::string_view>> split_merge(std::string_view text);

// A tokenizer.json document parsed with its BPE model's "vocab" and "merges" read into tables
// as they stream past, rather than into a JSON object of 100k+ keys and an array of as many
// strings: `root` holds the rest of the document (its "model" without those two fields).
struct TokenizerJson {
  nlohmann::json root;
  // The tables' texts back to back, and where each lies in them.
  std::string texts;
  std::vector<std::pair<std::pair<uint32_t, uint32_t>, int32_t>> vocab;
  std::vector<std::pair<std::pair<uint32_t, uint32_t>, std::pair<uint32_t, uint32_t>>> merges;
  // Views into `texts`: valid while this lives, unmoved.
  BpeTables tables() const;
};
// nullopt where the text is not a document read this way (malformed JSON; a model without an
// object of token ids and a list of merges as strings or pairs of strings; a field given
// twice): the caller parses it whole then, for the errors that name what is wrong and where.
std::optional<TokenizerJson> parse_tokenizer_json(std::string_view text);

class BpeModel {
 public:
  // tokenizer.json's "model": its options, and its "vocab" and "merges" unless `tables` has
  // them.
  BpeModel(const nlohmann::json& model, const pipeline::JsonPath& where,
           const BpeTables* tables = nullptr);

  // Appends the ids of one pre-tokenized piece to `out`.
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr for ids the vocabulary does not have.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id in the vocabulary.
  size_t vocab_size() const { return id_entry_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  // The slot of a token's text, or the empty slot where it would go; the same for a pair.
  size_t text_slot(std::string_view text) const;
  size_t merge_slot(uint64_t key) const;
  void add_token(std::string_view text, int32_t id);
  // The id of a token's text, or -1.
  int32_t find_token(std::string_view text) const;
  const Merge* find_merge(int32_t left, int32_t right) const;
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void apply_merges(std::vector<int32_t>& symbols) const;

  // The vocabulary, as flat tables rather than a node per token, so that a tokenizer of 150k
  // tokens and 300k merges is built in tens of milliseconds: each token's text and id in the
  // order given (a text given twice keeps its last id), the entry of each id (-1: none), and
  // the entries by their texts' hashes (open addressing, entry + 1 in each slot, 0 empty).
  std::vector<std::pair<std::string, int32_t>> entries_;
  std::vector<int32_t> id_entry_;
  std::vector<uint32_t> text_slots_;
  // The merges by the key of their pair (open addressing, kNoPair empty); a pair given twice
  // keeps its first (lowest) rank.
  static constexpr uint64_t kNoPair = ~uint64_t{0};
  struct MergeSlot {
    uint64_t key = kNoPair;
    Merge merge{};
  };
  std::vector<MergeSlot> merge_slots_;
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
