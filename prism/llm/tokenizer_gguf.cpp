// A tokenizer from a GGUF file's tokenizer section: llama.cpp's converter writes the Hugging Face
// tokenizer out as arrays (tokens, their types, merges) and a few names (the model, the
// pre-tokenizer); here they become the tokenizer.json and tokenizer_config.json documents they
// came from, which Tokenizer::build builds as it builds any other, the BPE model's vocabulary
// and merges given as views of the file's arrays (BpeTables) rather than as JSON. What llama.cpp
// leaves implicit in a name (the pre-tokenizer's split pattern, whether merges are ignored for
// whole words in the vocabulary) is written out per name, and a name not listed is refused.
//
// A SentencePiece model (tokenizer.ggml.model "llama": Llama 2, Mistral, TinyLlama, ...) has
// no merges, only a score per token: it becomes the BPE model Hugging Face converts such a
// tokenizer to (transformers' SentencePieceExtractor), whose merges are every pair of tokens
// that concatenate into a token, most likely (highest score) first. That is the order
// SentencePiece's and llama.cpp's BPE merge pairs in.
#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "prism/core/error.h"
#include "prism/io/gguf.h"
#include "prism/llm/bpe.h"
#include "prism/llm/tokenizer.h"

namespace prism::llm {
namespace {

using nlohmann::json;

// llama.cpp's token types (tokenizer.ggml.token_type).
enum TokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// The normalizer, pre-tokenizer and BPE options a `tokenizer.ggml.pre` name stands for: those
// of the tokenizer.json the name is given to by llama.cpp's converter.
struct PreTokenizer {
  std::string_view name;
  json normalizer;
  json pre_tokenizer;
  bool ignore_merges;
};

// Llama 3's split pattern, as its tokenizer.json states it ("llama-bpe" in llama.cpp's names;
// LFM 2's "lfm2" is the same).
constexpr std::string_view kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen 2's, 2.5's and 3's ("qwen2"): digits one by one.
constexpr std::string_view kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen 3.5's ("qwen35"): Qwen 2's, with combining marks (\p{M}) kept in words.
constexpr std::string_view kQwen35Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// A regex split (isolated pieces), then byte-level symbols; trim_offsets as tokenizer.json
// says it (it changes no ids).
json split_then_byte_level(std::string_view pattern, bool trim_offsets) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", pattern}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"trim_offsets", trim_offsets},
             {"use_regex", false}}}}};
}

std::span<const PreTokenizer> known_pre_tokenizers() {
  // llama.cpp ignores the merges for words in the vocabulary under llama-bpe and lfm2 (as
  // Llama 3's tokenizer.json says), and applies no normalizer, where Qwen's tokenizer.json
  // composes the text (NFC) first.
  static const json kNfc = {{"type", "NFC"}};
  static const PreTokenizer kKnown[] = {
      {"llama-bpe", nullptr, split_then_byte_level(kLlama3Pattern, true), /*ignore_merges=*/true},
      {"lfm2", nullptr, split_then_byte_level(kLlama3Pattern, true), /*ignore_merges=*/true},
      {"qwen2", kNfc, split_then_byte_level(kQwen2Pattern, false), /*ignore_merges=*/false},
      {"qwen35", kNfc, split_then_byte_level(kQwen35Pattern, false), /*ignore_merges=*/false},
  };
  return kKnown;
}

const PreTokenizer* find_pre_tokenizer(std::string_view name) {
  for (const PreTokenizer& p : known_pre_tokenizers()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::optional<int64_t> optional_id(const io::GgufHeader& h, std::string_view key, size_t tokens) {
  if (!h.find(key)) return std::nullopt;
  const int64_t id = h.get_int(key);
  PRISM_CHECK(id >= 0 && static_cast<size_t>(id) < tokens, "{}: {} is {}, outside the {} tokens",
              h.uri, key, id, tokens);
  return id;
}

}  // namespace

std::optional<std::string_view> Tokenizer::gguf_pre_tokenizer(const json& pre_tokenizer,
                                                              bool ignore_merges) {
  for (const PreTokenizer& p : known_pre_tokenizers()) {
    if (p.pre_tokenizer == pre_tokenizer && p.ignore_merges == ignore_merges) return p.name;
  }
  return std::nullopt;
}

namespace {

// What the tokenizer.json of a byte-level BPE model (tokenizer.ggml.model "gpt2") holds besides
// its tokens: the normalizer, pre-tokenizer, decoder and model options of the
// `tokenizer.ggml.pre` name; the merges into `tables`.
json byte_level_bpe(const io::GgufHeader& h, BpeTables& tables) {
  const std::string_view pre_name =
      h.find("tokenizer.ggml.pre") ? h.get_string("tokenizer.ggml.pre") : "(none)";
  const PreTokenizer* pre = find_pre_tokenizer(pre_name);
  if (!pre) {
    std::vector<std::string_view> known;
    for (const PreTokenizer& p : known_pre_tokenizers()) known.push_back(p.name);
    fail("{}: tokenizer.ggml.pre \"{}\" is not supported ({} are)", h.uri, pre_name,
         fmt::join(known, ", "));
  }
  const io::GgufValue& merges = h.get_array("tokenizer.ggml.merges");
  PRISM_CHECK(merges.element_type() == io::GgufValueType::STRING,
              "{}: tokenizer.ggml.merges must be an array of strings", h.uri);
  tables.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string_view text = merges.string_at(i);
    const auto halves = split_merge(text);
    PRISM_CHECK(halves, "{}: tokenizer.ggml.merges[{}]: expected \"left right\", got \"{}\"", h.uri,
                i, text);
    tables.merges.push_back(*halves);
  }
  return {{"normalizer", pre->normalizer},
          {"pre_tokenizer", pre->pre_tokenizer},
          {"decoder",
           {{"type", "ByteLevel"},
            {"add_prefix_space", true},
            {"trim_offsets", true},
            {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"ignore_merges", pre->ignore_merges}}}};
}

// The same for a SentencePiece BPE model (tokenizer.ggml.model "llama"), as Hugging Face's
// converter writes Llama 2's: spaces become U+2581 ("▁"), one is put before the text (and
// after each special token, as llama.cpp does) unless tokenizer.ggml.add_space_prefix is
// false, unknown characters fall back to <0xAB> byte tokens, and decoding undoes it all.
json sentencepiece_bpe(const io::GgufHeader& h, const io::GgufValue& tokens,
                       const std::vector<int64_t>& types, BpeTables& tables) {
  const io::GgufValue& scores = h.get_array("tokenizer.ggml.scores");
  PRISM_CHECK(scores.element_type() == io::GgufValueType::FLOAT32 && scores.size() == tokens.size(),
              "{}: tokenizer.ggml.scores must list an f32 score for each of the {} tokens", h.uri,
              tokens.size());
  // Every pair of tokens whose concatenation is a normal token, split at each character
  // boundary: by the merged token's score, highest first; for one token, by the ids of its
  // halves (transformers' SentencePieceExtractor, a stable sort).
  struct Merge {
    float score;
    int64_t left, right;
    std::string_view a, b;
  };
  std::unordered_map<std::string_view, int64_t> vocab;
  for (const auto& [text, id] : tables.vocab) vocab[text] = id;
  std::vector<Merge> merges;
  bool bytes = false;
  for (size_t id = 0; id < tokens.size(); ++id) {
    bytes = bytes || types[id] == kByte;
    if (types[id] != kNormal) continue;
    const std::string_view t = tokens.string_at(id);
    const size_t first = merges.size();
    for (size_t cut = 1; cut < t.size(); ++cut) {
      if ((static_cast<unsigned char>(t[cut]) & 0xc0) == 0x80) continue;  // inside a character
      const std::string_view a = t.substr(0, cut), b = t.substr(cut);
      const auto l = vocab.find(a), r = vocab.find(b);
      if (l == vocab.end() || r == vocab.end()) continue;
      merges.push_back({static_cast<float>(scores.float_at(id)), l->second, r->second, a, b});
    }
    std::sort(merges.begin() + static_cast<std::ptrdiff_t>(first), merges.end(),
              [](const Merge& x, const Merge& y) {
                return std::pair(x.left, x.right) < std::pair(y.left, y.right);
              });
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& x, const Merge& y) { return x.score > y.score; });
  tables.merges.reserve(merges.size());
  for (const Merge& m : merges) tables.merges.emplace_back(m.a, m.b);

  std::optional<int64_t> unk = optional_id(h, "tokenizer.ggml.unknown_token_id", tokens.size());
  for (size_t id = 0; !unk && id < tokens.size(); ++id) {
    if (types[id] == kUnknown) unk = static_cast<int64_t>(id);
  }
  const bool prefix = h.find("tokenizer.ggml.add_space_prefix")
                          ? h.get_bool("tokenizer.ggml.add_space_prefix")
                          : true;
  const std::string_view kSpace = "\u2581";
  json normalizers = json::array();
  if (prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}});
  return {{"normalizer", {{"type", "Sequence"}, {"normalizers", std::move(normalizers)}}},
          {"pre_tokenizer", nullptr},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", prefix ? 1u : 0u}, {"stop", 0u}}}}}},
          {"model",
           {{"type", "BPE"},
            {"byte_fallback", bytes},
            {"fuse_unk", true},
            {"unk_token", unk ? json(std::string(tokens.string_at(*unk))) : json(nullptr)}}}};
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const io::GgufHeader& h) {
  if (!h.find("tokenizer.ggml.model")) fail("{}: no tokenizer (tokenizer.ggml.model)", h.uri);
  const std::string_view model = h.get_string("tokenizer.ggml.model");
  const bool spm = model == "llama";
  if (model != "gpt2" && !spm) {
    fail(
        "{}: tokenizer.ggml.model \"{}\" is not supported (gpt2, byte-level BPE, and llama, "
        "SentencePiece BPE, are)",
        h.uri, model);
  }

  const io::GgufValue& tokens = h.get_array("tokenizer.ggml.tokens");
  PRISM_CHECK(tokens.element_type() == io::GgufValueType::STRING,
              "{}: tokenizer.ggml.tokens must be an array of strings", h.uri);
  const io::GgufValue* type_array = h.find("tokenizer.ggml.token_type");
  PRISM_CHECK(!type_array || (type_array->is_array() && type_array->size() == tokens.size()),
              "{}: tokenizer.ggml.token_type must list a type for each of the {} tokens", h.uri,
              tokens.size());
  std::vector<int64_t> types(tokens.size(), kNormal);
  if (type_array) {
    for (size_t id = 0; id < tokens.size(); ++id) types[id] = type_array->int_at(id);
  }

  // Control and user-defined tokens (and a SentencePiece model's unknown token, which llama.cpp
  // matches in the text too) are tokenizer.json's added tokens, matched in the text before it
  // is split. A byte-level BPE vocabulary holds the others; a SentencePiece one every token, as
  // Hugging Face's converter writes it.
  PRISM_CHECK(tokens.size() <= static_cast<size_t>(pipeline::kMaxTokenId) + 1,
              "{}: tokenizer.ggml.tokens has {} tokens, more than the {} a tokenizer may have",
              h.uri, tokens.size(), pipeline::kMaxTokenId + 1);
  BpeTables tables;
  tables.vocab.reserve(tokens.size());
  json added = json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string_view text = tokens.string_at(id);
    const int64_t type = types[id];
    const bool special = type == kControl || (spm && type == kUnknown);
    if (special || type == kUserDefined) {
      added.push_back({{"id", id},
                       {"content", text},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", special}});
      if (!spm) continue;
    }
    tables.vocab.emplace_back(text, static_cast<int32_t>(id));
  }

  const std::optional<int64_t> bos = optional_id(h, "tokenizer.ggml.bos_token_id", tokens.size());
  const std::optional<int64_t> eos = optional_id(h, "tokenizer.ggml.eos_token_id", tokens.size());
  const std::optional<int64_t> pad =
      optional_id(h, "tokenizer.ggml.padding_token_id", tokens.size());
  // llama.cpp adds BOS unless told not to; EOS only when told to.
  const bool add_bos =
      h.find("tokenizer.ggml.add_bos_token") ? h.get_bool("tokenizer.ggml.add_bos_token") : true;
  const bool add_eos =
      h.find("tokenizer.ggml.add_eos_token") ? h.get_bool("tokenizer.ggml.add_eos_token") : false;
  json post_processor = nullptr;
  if ((add_bos && bos) || (add_eos && eos)) {
    json single = json::array(), special = json::object();
    auto special_token = [&](int64_t id) {
      const std::string text(tokens.string_at(id));
      single.push_back({{"SpecialToken", {{"id", text}, {"type_id", 0}}}});
      special[text] = {{"id", text}, {"ids", {id}}, {"tokens", {text}}};
    };
    if (add_bos && bos) special_token(*bos);
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (add_eos && eos) special_token(*eos);
    post_processor = {
        {"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", special}};
  }

  json document = spm ? sentencepiece_bpe(h, tokens, types, tables) : byte_level_bpe(h, tables);
  document["added_tokens"] = std::move(added);
  document["post_processor"] = std::move(post_processor);
  // The names of special tokens a chat template reads, and the template itself.
  json config = json::object();
  if (h.find("tokenizer.chat_template")) {
    config["chat_template"] = std::string(h.get_string("tokenizer.chat_template"));
  }
  if (bos) config["bos_token"] = std::string(tokens.string_at(*bos));
  if (eos) config["eos_token"] = std::string(tokens.string_at(*eos));
  if (pad) config["pad_token"] = std::string(tokens.string_at(*pad));
  return build(document, {}, h.uri + " (tokenizer.ggml)", config, {}, h.uri, &tables);
}

}  // namespace prism::llm
