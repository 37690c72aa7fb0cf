#include "prism/llm/bpe.h"

#include <fmt/format.h>

#include <queue>

#include "prism/core/error.h"
#include "prism/llm/unicode.h"

namespace prism::llm {

using nlohmann::json;
using pipeline::JsonPath;

namespace {
constexpr size_t kCacheCapacity = 1 << 18;
constexpr size_t kLongestCachedPiece = 256;
}  // namespace

BpeModel::BpeModel(const json& model, const JsonPath& where) {
  std::string type = pipeline::optional_string(model, "type", "BPE", where);
  if (type != "BPE") fail("{}: unsupported model type \"{}\" (only BPE)", where.str(), type);
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    const json& dropout = model["dropout"];
    if (!dropout.is_number()) fail("{}: expected a number or null", (where / "dropout").str());
    if (dropout.get<double>() != 0.0) {
      fail("{}: BPE dropout is for training; inference expects none", (where / "dropout").str());
    }
  }
  continuing_subword_prefix_ =
      pipeline::optional_string(model, "continuing_subword_prefix", "", where);
  end_of_word_suffix_ = pipeline::optional_string(model, "end_of_word_suffix", "", where);
  ignore_merges_ = pipeline::optional_bool(model, "ignore_merges", false, where);
  byte_fallback_ = pipeline::optional_bool(model, "byte_fallback", false, where);
  fuse_unk_ = pipeline::optional_bool(model, "fuse_unk", false, where);

  const json& vocab = pipeline::require(model, "vocab", where);
  if (!vocab.is_object()) fail("{}: expected an object of token: id", (where / "vocab").str());
  vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    const int32_t value = pipeline::token_id(id, where / "vocab" / token);
    vocab_.emplace(token, value);
    if (static_cast<size_t>(value) >= id_to_token_.size()) {
      id_to_token_.resize(static_cast<size_t>(value) + 1);
      id_known_.resize(static_cast<size_t>(value) + 1);
    }
    id_to_token_[value] = token;
    id_known_[value] = true;
  }

  std::string unk = pipeline::optional_string(model, "unk_token", "", where);
  if (!unk.empty()) {
    auto it = vocab_.find(unk);
    if (it == vocab_.end()) fail("{}: unk_token \"{}\" is not in the vocabulary", where.str(), unk);
    unk_id_ = it->second;
  }

  const json& merges = pipeline::require(model, "merges", where);
  if (!merges.is_array()) fail("{}: expected a list", (where / "merges").str());
  merges_.reserve(merges.size());
  const size_t prefix = continuing_subword_prefix_.size();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& merge = merges[rank];
    std::string left, right;
    // Two spellings exist: "a b" (older files) and ["a", "b"] (newer, allows spaces in tokens).
    if (merge.is_string()) {
      const auto& text = merge.get_ref<const std::string&>();
      size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        fail("{}: expected \"left right\", got \"{}\"", (where / "merges")[rank].str(), text);
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      fail("{}: expected \"left right\" or [\"left\", \"right\"]", (where / "merges")[rank].str());
    }
    std::string merged = left + (prefix && right.compare(0, prefix, continuing_subword_prefix_) == 0
                                     ? right.substr(prefix)
                                     : right);
    auto lookup = [&](const std::string& token) {
      auto it = vocab_.find(token);
      if (it == vocab_.end()) {
        fail("{}: merge uses \"{}\", which is not in the vocabulary",
             (where / "merges")[rank].str(), token);
      }
      return it->second;
    };
    int32_t left_id = lookup(left);
    int32_t right_id = lookup(right);
    int32_t merged_id = lookup(merged);
    merges_.try_emplace(pair_key(left_id, right_id), Merge{static_cast<int32_t>(rank), merged_id});
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !id_known_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  size_t pos = 0;
  bool previous_unknown = false;
  std::string buffer;
  while (pos < piece.size()) {
    size_t begin = pos;
    pos += static_cast<size_t>(unicode::sequence_length(static_cast<unsigned char>(piece[pos])));
    pos = std::min(pos, piece.size());
    std::string_view character = piece.substr(begin, pos - begin);
    std::string_view lookup = character;
    if ((begin > 0 && !continuing_subword_prefix_.empty()) ||
        (pos == piece.size() && !end_of_word_suffix_.empty())) {
      buffer.clear();
      if (begin > 0) buffer += continuing_subword_prefix_;
      buffer += character;
      if (pos == piece.size()) buffer += end_of_word_suffix_;
      lookup = buffer;
    }
    if (auto it = vocab_.find(lookup); it != vocab_.end()) {
      symbols.push_back(it->second);
      previous_unknown = false;
      continue;
    }
    if (byte_fallback_) {
      // Each byte as its <0xAB> token, when the vocabulary has all of them.
      std::vector<int32_t> bytes;
      for (unsigned char c : character) {
        auto it = vocab_.find(fmt::format("<0x{:02X}>", c));
        if (it == vocab_.end()) break;
        bytes.push_back(it->second);
      }
      if (bytes.size() == character.size()) {
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());
        previous_unknown = false;
        continue;
      }
    }
    if (unk_id_) {
      if (!(fuse_unk_ && previous_unknown)) symbols.push_back(*unk_id_);
      previous_unknown = true;
    }
    // With no unk_token an unknown character is dropped, as Hugging Face does.
  }
}

void BpeModel::apply_merges(std::vector<int32_t>& symbols) const {
  const size_t n = symbols.size();
  if (n < 2) return;
  // A doubly linked list over the symbols, and a heap of candidate merges ordered by rank, then
  // position: the lowest-ranked pair merges first, the leftmost among equals.
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t merged_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t left) {
    int32_t right = next[left];
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[left], symbols[right]));
    if (it != merges_.end()) heap.push({it->second.rank, left, it->second.merged_id});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(static_cast<int32_t>(i));
  while (!heap.empty()) {
    Candidate top = heap.top();
    heap.pop();
    int32_t left = top.pos;
    if (!alive[left]) continue;
    int32_t right = next[left];
    if (right < 0) continue;
    // Stale entry: the pair at this position changed since it was queued.
    auto it = merges_.find(pair_key(symbols[left], symbols[right]));
    if (it == merges_.end() || it->second.merged_id != top.merged_id) continue;
    symbols[left] = top.merged_id;
    alive[right] = false;
    next[left] = next[right];
    if (next[right] >= 0) prev[next[right]] = left;
    if (prev[left] >= 0) consider(prev[left]);
    consider(left);
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) symbols[out++] = symbols[i];
  }
  symbols.resize(out);
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  CacheShard* shard = nullptr;
  if (piece.size() <= kLongestCachedPiece) {
    // The shard from the hash's high bits: the map indexes its buckets by the low ones.
    shard = &cache_[(StringHash{}(piece) >> 32) % kCacheShards];
    std::lock_guard lock(shard->mutex);
    if (auto it = shard->pieces.find(piece); it != shard->pieces.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  initial_symbols(piece, symbols);
  apply_merges(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (shard) {
    std::lock_guard lock(shard->mutex);
    if (shard->pieces.size() >= kCacheCapacity / kCacheShards) shard->pieces.clear();
    shard->pieces.emplace(std::string(piece), std::move(symbols));
  }
}

}  // namespace prism::llm
