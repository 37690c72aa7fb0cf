#include "prism/llm/bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <queue>

#include "prism/core/error.h"
#include "prism/llm/unicode.h"

namespace prism::llm {

using nlohmann::json;
using pipeline::JsonPath;

namespace {
constexpr size_t kCacheCapacity = 1 << 18;
constexpr size_t kLongestCachedPiece = 256;

// The smallest power of two with at least twice `n` slots (at most half of them full).
size_t slot_count(size_t n) { return std::bit_ceil(std::max<size_t>(2 * n, 16)); }

// A pair's first slot among `slots` (a power of two): the high bits of a multiplicative hash
// (its low bits would depend on the right id's low bits alone).
size_t pair_slot(uint64_t key, size_t slots) {
  return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - std::countr_zero(slots)));
}

// nlohmann's SAX events of a tokenizer.json: all but those of the model's "vocab" and "merges"
// go to a DOM builder; those two fill the tables. Returning false stops the parse (the caller
// then parses the text whole).
class TablesSax {
 public:
  using json = nlohmann::json;
  explicit TablesSax(TokenizerJson& out) : out_(out), dom_(out.root, false) {}

  bool null() { return flush() && dom_.null(); }
  bool boolean(bool v) { return flush() && dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return flush() && dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) {
    if (mode_ == Mode::vocab) {
      if (!have_token_ || v > static_cast<uint64_t>(pipeline::kMaxTokenId)) return false;
      out_.vocab.emplace_back(token_, static_cast<int32_t>(v));
      have_token_ = false;
      return true;
    }
    return flush() && dom_.number_unsigned(v);
  }
  bool number_float(json::number_float_t v, const json::string_t& text) {
    return flush() && dom_.number_float(v, text);
  }
  bool string(json::string_t& v) {
    if (mode_ == Mode::merges) {
      const auto halves = split_merge(v);
      if (!halves) return false;
      out_.merges.emplace_back(add(halves->first), add(halves->second));
      return true;
    }
    if (mode_ == Mode::pair) {
      if (halves_ == 2) return false;
      pair_[halves_++] = add(v);
      return true;
    }
    return flush() && dom_.string(v);
  }
  bool binary(json::binary_t& v) { return flush() && dom_.binary(v); }
  bool key(json::string_t& k) {
    if (mode_ == Mode::vocab) {
      if (have_token_) return false;
      token_ = add(k);
      have_token_ = true;
      return true;
    }
    if (!flush()) return false;
    if (depth_ == 1) {
      model_key_ = k == "model";
      if (model_key_ && ++models_ > 1) return false;  // given twice: the DOM keeps the last
    }
    if (depth_ == 2 && in_model_ && (k == "vocab" || k == "merges")) {
      bool& seen = k == "vocab" ? seen_vocab_ : seen_merges_;
      if (seen) return false;
      seen = true;
      held_ = k;  // a table, unless its value says otherwise
      return true;
    }
    return dom_.key(k);
  }
  bool start_object(std::size_t n) {
    if (held_ == "vocab") {
      held_.clear();
      mode_ = Mode::vocab;
      return true;
    }
    if (!flush()) return false;
    if (depth_ == 1 && model_key_) in_model_ = true;
    ++depth_;
    return dom_.start_object(n);
  }
  bool end_object() {
    if (mode_ == Mode::vocab) {
      if (have_token_) return false;
      mode_ = Mode::plain;
      vocab_done_ = true;
      return true;
    }
    if (mode_ != Mode::plain) return false;
    if (--depth_ == 1) in_model_ = false;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (held_ == "merges") {
      held_.clear();
      mode_ = Mode::merges;
      return true;
    }
    if (mode_ == Mode::merges) {
      mode_ = Mode::pair;
      halves_ = 0;
      return true;
    }
    if (!flush()) return false;
    ++depth_;
    return dom_.start_array(n);
  }
  bool end_array() {
    if (mode_ == Mode::pair) {
      if (halves_ != 2) return false;
      out_.merges.emplace_back(pair_[0], pair_[1]);
      mode_ = Mode::merges;
      return true;
    }
    if (mode_ == Mode::merges) {
      mode_ = Mode::plain;
      merges_done_ = true;
      return true;
    }
    if (mode_ != Mode::plain) return false;
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

  // Both tables read, and the rest of the document whole.
  bool complete() const { return vocab_done_ && merges_done_ && depth_ == 0; }

 private:
  enum class Mode { plain, vocab, merges, pair };
  using Span = std::pair<uint32_t, uint32_t>;

  Span add(std::string_view text) {
    const Span span{static_cast<uint32_t>(out_.texts.size()), static_cast<uint32_t>(text.size())};
    out_.texts += text;
    return span;
  }
  // Outside the tables: a held "vocab" or "merges" key goes to the DOM before the value that
  // showed it is not a table. Inside them: false, as nothing else belongs there.
  bool flush() {
    if (mode_ != Mode::plain) return false;
    if (held_.empty()) return true;
    json::string_t key = std::move(held_);
    held_.clear();
    return dom_.key(key);
  }

  TokenizerJson& out_;
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  Mode mode_ = Mode::plain;
  int depth_ = 0;  // containers open in the DOM
  int models_ = 0;
  bool model_key_ = false, in_model_ = false;
  bool seen_vocab_ = false, seen_merges_ = false, vocab_done_ = false, merges_done_ = false;
  json::string_t held_;
  Span token_{};
  bool have_token_ = false;
  Span pair_[2]{};
  int halves_ = 0;
};

}  // namespace

std::optional<TokenizerJson> parse_tokenizer_json(std::string_view text) {
  // Past 4 GiB the tables' offsets would not fit: the whole document then.
  if (text.size() >= (uint64_t{1} << 32)) return std::nullopt;
  TokenizerJson out;
  out.texts.reserve(text.size() / 2);
  TablesSax sax(out);
  try {
    if (!nlohmann::json::sax_parse(text.begin(), text.end(), &sax) || !sax.complete()) {
      return std::nullopt;
    }
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return out;
}

BpeTables TokenizerJson::tables() const {
  auto view = [&](std::pair<uint32_t, uint32_t> at) {
    return std::string_view(texts).substr(at.first, at.second);
  };
  BpeTables t;
  t.vocab.reserve(vocab.size());
  for (const auto& [at, id] : vocab) t.vocab.emplace_back(view(at), id);
  t.merges.reserve(merges.size());
  for (const auto& [a, b] : merges) t.merges.emplace_back(view(a), view(b));
  return t;
}

std::optional<std::pair<std::string_view, std::string_view>> split_merge(std::string_view text) {
  const size_t space = text.find(' ');
  if (space == std::string_view::npos || text.find(' ', space + 1) != std::string_view::npos) {
    return std::nullopt;
  }
  return std::pair(text.substr(0, space), text.substr(space + 1));
}

BpeModel::BpeModel(const json& model, const JsonPath& where, const BpeTables* tables) {
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

  BpeTables from_json;
  if (!tables) {
    const json& vocab = pipeline::require(model, "vocab", where);
    if (!vocab.is_object()) fail("{}: expected an object of token: id", (where / "vocab").str());
    from_json.vocab.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      from_json.vocab.emplace_back(it.key(), pipeline::token_id(*it, where / "vocab" / it.key()));
    }
    const json& merges = pipeline::require(model, "merges", where);
    if (!merges.is_array()) fail("{}: expected a list", (where / "merges").str());
    from_json.merges.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const json& merge = merges[rank];
      // Two spellings exist: "a b" (older files) and ["a", "b"] (newer, allows spaces in tokens).
      if (merge.is_string()) {
        const auto& text = merge.get_ref<const std::string&>();
        auto halves = split_merge(text);
        if (!halves) {
          fail("{}: expected \"left right\", got \"{}\"", (where / "merges")[rank].str(), text);
        }
        from_json.merges.push_back(*halves);
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                 merge[1].is_string()) {
        from_json.merges.emplace_back(merge[0].get_ref<const std::string&>(),
                                      merge[1].get_ref<const std::string&>());
      } else {
        fail("{}: expected \"left right\" or [\"left\", \"right\"]",
             (where / "merges")[rank].str());
      }
    }
    tables = &from_json;
  }

  entries_.reserve(tables->vocab.size());
  text_slots_.assign(slot_count(tables->vocab.size()), 0);
  for (const auto& [text, id] : tables->vocab) add_token(text, id);

  std::string unk = pipeline::optional_string(model, "unk_token", "", where);
  if (!unk.empty()) {
    const int32_t id = find_token(unk);
    if (id < 0) fail("{}: unk_token \"{}\" is not in the vocabulary", where.str(), unk);
    unk_id_ = id;
  }

  merge_slots_.resize(slot_count(tables->merges.size()));
  const std::string_view prefix = continuing_subword_prefix_;
  std::string merged;
  for (size_t rank = 0; rank < tables->merges.size(); ++rank) {
    const auto [left, right] = tables->merges[rank];
    merged.assign(left);
    merged += !prefix.empty() && right.starts_with(prefix) ? right.substr(prefix.size()) : right;
    auto lookup = [&](std::string_view token) {
      const int32_t id = find_token(token);
      if (id < 0) {
        fail("{}: merge uses \"{}\", which is not in the vocabulary",
             (where / "merges")[rank].str(), token);
      }
      return id;
    };
    const uint64_t key = pair_key(lookup(left), lookup(right));
    const int32_t merged_id = lookup(merged);
    MergeSlot& slot = merge_slots_[merge_slot(key)];
    // The same pair again keeps its first rank.
    if (slot.key == kNoPair) slot = {key, Merge{static_cast<int32_t>(rank), merged_id}};
  }
}

size_t BpeModel::text_slot(std::string_view text) const {
  const size_t mask = text_slots_.size() - 1;
  const size_t hash = StringHash{}(text);
  size_t i = hash & mask;
  while (text_slots_[i] != 0 && entries_[text_slots_[i] - 1].first != text) i = (i + 1) & mask;
  return i;
}

size_t BpeModel::merge_slot(uint64_t key) const {
  const size_t mask = merge_slots_.size() - 1;
  size_t i = pair_slot(key, merge_slots_.size());
  while (merge_slots_[i].key != kNoPair && merge_slots_[i].key != key) i = (i + 1) & mask;
  return i;
}

void BpeModel::add_token(std::string_view text, int32_t id) {
  text_slots_[text_slot(text)] = static_cast<uint32_t>(entries_.size() + 1);
  entries_.emplace_back(text, id);
  if (static_cast<size_t>(id) >= id_entry_.size())
    id_entry_.resize(static_cast<size_t>(id) + 1, -1);
  id_entry_[id] = static_cast<int32_t>(entries_.size() - 1);
}

int32_t BpeModel::find_token(std::string_view text) const {
  const uint32_t entry = text_slots_[text_slot(text)];
  return entry == 0 ? -1 : entries_[entry - 1].second;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  const MergeSlot& slot = merge_slots_[merge_slot(key)];
  return slot.key == key ? &slot.merge : nullptr;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const int32_t id = find_token(token);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_entry_.size() || id_entry_[id] < 0) return nullptr;
  return &entries_[id_entry_[id]].first;
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
    if (const int32_t id = find_token(lookup); id >= 0) {
      symbols.push_back(id);
      previous_unknown = false;
      continue;
    }
    if (byte_fallback_) {
      // Each byte as its <0xAB> token, when the vocabulary has all of them.
      std::vector<int32_t> bytes;
      for (unsigned char c : character) {
        const int32_t id = find_token(fmt::format("<0x{:02X}>", c));
        if (id < 0) break;
        bytes.push_back(id);
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
    if (const Merge* m = find_merge(symbols[left], symbols[right])) {
      heap.push({m->rank, left, m->merged_id});
    }
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
    const Merge* m = find_merge(symbols[left], symbols[right]);
    if (!m || m->merged_id != top.merged_id) continue;
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
    if (const int32_t id = find_token(piece); id >= 0) {
      out.push_back(id);
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
