// The stages of a Hugging Face tokenizer.json, each built from its JSON description:
//   normalizer -> pre-tokenizer -> model (BPE) -> post-processor   when encoding,
//   model ids -> tokens -> decoder                                 when decoding.
// Internal to prism/llm: users see prism/llm/tokenizer.h.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "prism/llm/regex.h"

namespace prism::llm::pipeline {

// Where a JSON value sits, for errors: "tokenizer.json: normalizer.normalizers[1]".
// With the file's text at hand, the place is given as file:line:column too.
struct JsonPath {
  std::string file;
  std::string path;
  std::string_view text;  // the whole file, when known
  JsonPath operator/(std::string_view key) const;
  JsonPath operator[](size_t index) const;
  std::string str() const;
};

// A field of `node` that must be there and have the right type.
const nlohmann::json& require(const nlohmann::json& node, std::string_view key,
                              const JsonPath& where);
std::string require_string(const nlohmann::json& node, std::string_view key, const JsonPath& where);
// Optional fields; null counts as absent.
bool optional_bool(const nlohmann::json& node, std::string_view key, bool fallback,
                   const JsonPath& where);
std::string optional_string(const nlohmann::json& node, std::string_view key,
                            std::string_view fallback, const JsonPath& where);

// A token id: an integer from 0 to kMaxTokenId (more ids than any vocabulary has; an id past
// it would have the tables of ids grow to gigabytes).
inline constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
int32_t token_id(const nlohmann::json& id, const JsonPath& where);

// The "pattern" field of Split, Replace: {"String": literal} or {"Regex": pattern}.
Regex pattern_regex(const nlohmann::json& node, const JsonPath& where);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string text) const = 0;
};

// Receives the pieces a pre-tokenizer cuts, one at a time, without owning them: a non-owning
// reference to a callable (no allocation per call). `at_input_start` is true for the piece that
// begins the whole input (Metaspace's prepend_scheme "first" depends on it).
class PieceSink {
 public:
  template <typename F>
  PieceSink(const F& f)  // NOLINT: implicit, like a function_ref
      : object_(&f), call_([](const void* o, std::string_view text, bool at_input_start) {
          (*static_cast<const F*>(o))(text, at_input_start);
        }) {}
  void operator()(std::string_view text, bool at_input_start) const {
    call_(object_, text, at_input_start);
  }

 private:
  const void* object_;
  void (*call_)(const void*, std::string_view, bool);
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Cuts `text` and hands each piece, in order, to `sink`.
  virtual void pre_tokenize(std::string_view text, bool at_input_start, PieceSink sink) const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens around one encoded sequence.
  virtual void process(std::vector<int32_t>& ids) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Hugging Face's decode_chain: tokens in, tokens out; the caller joins the result.
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

// Built from a JSON node (null gives nullptr: the stage is absent).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& node, const JsonPath& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& node, const JsonPath& where);
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& node,
                                                   const JsonPath& where);
// `added_tokens`: contents that byte-level decoding passes through as they are.
// clean_up_tokenization: Hugging Face's removal of spaces before punctuation and contractions.
std::string clean_up_tokenization(std::string text);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& node, const JsonPath& where,
                                      const std::unordered_set<std::string>& added_tokens);

}  // namespace prism::llm::pipeline
