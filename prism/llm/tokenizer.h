// Hugging Face tokenizers in C++: loads tokenizer.json (and tokenizer_config.json beside it) and
// encodes and decodes exactly as Hugging Face's `tokenizers` library (and transformers) do.
//
//   auto tokenizer = prism::llm::Tokenizer::load("path/to/model_dir");
//   std::vector<int32_t> ids = tokenizer.encode("Hello", {.add_special_tokens = true});
//   std::string text = tokenizer.decode(ids, {.skip_special_tokens = true});
//
// Supported: the BPE model (byte-level or byte-fallback), the normalizers, pre-tokenizers,
// post-processors and decoders listed in docs/tokenizers.md, and added tokens with their
// special / lstrip / rstrip / normalized / single_word flags.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace prism::io {
struct GgufHeader;
}

namespace prism::llm {

struct BpeTables;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// What tokenizer_config.json says beyond tokenizer.json.
struct TokenizerConfig {
  std::string chat_template;         // empty when there is none
  std::string chat_template_source;  // the file it came from, for errors
  // Named special tokens ("bos_token", "eos_token", ...) as strings; absent ones are missing.
  std::vector<std::pair<std::string, std::string>> special_tokens;
  // As the file says (false when absent, as in transformers 5); decode() does not apply it by
  // itself (see DecodeOptions).
  bool clean_up_tokenization_spaces = false;
  nlohmann::json raw;  // the whole file, null when there is none
};

struct EncodeOptions {
  // Lets the post-processor add what the model expects around a text (e.g. Llama's BOS).
  bool add_special_tokens = false;
};

struct DecodeOptions {
  bool skip_special_tokens = false;
  // Removes spaces before punctuation and contractions (" ." -> "."). Unset: no, whatever
  // tokenizer_config.json says, as Hugging Face decodes BPE models (transformers 5 skips the
  // clean-up for them, since it changes their text; the `tokenizers` library has none).
  std::optional<bool> clean_up_tokenization_spaces;
};

class Tokenizer {
 public:
  // `location`: a directory holding tokenizer.json (and optionally tokenizer_config.json,
  // chat_template.jinja), the path of a tokenizer.json, or a GGUF file (from_gguf).
  static Tokenizer load(std::string_view location);
  // From text already in memory; the names are used in errors.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view source_name,
                             std::string_view config_json = {},
                             std::string_view config_source_name = "tokenizer_config.json");
  // From the two documents already parsed (or built: from_gguf); `config` may be null.
  static Tokenizer from_documents(const nlohmann::json& tokenizer, std::string_view source_name,
                                  const nlohmann::json& config = nullptr,
                                  std::string_view config_source_name = "tokenizer_config.json");
  // From a GGUF file's tokenizer section and chat template (prism/llm/tokenizer_gguf.cpp):
  // tokenizer.ggml.model "gpt2" (byte-level BPE) with the pre-tokenizers listed in
  // docs/tokenizers.md. Throws, naming the file and the value, for others.
  static Tokenizer from_gguf(const io::GgufHeader& header);
  // The other way: llama.cpp's `tokenizer.ggml.pre` name for a tokenizer.json's pre_tokenizer
  // and its model's ignore_merges ("llama-bpe" for Llama 3's), nothing for one not listed.
  static std::optional<std::string_view> gguf_pre_tokenizer(const nlohmann::json& pre_tokenizer,
                                                            bool ignore_merges);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's string as the vocabulary spells it (byte-level characters for BPE).
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // One past the largest id, added tokens included.
  size_t vocab_size() const;
  const std::vector<AddedToken>& added_tokens() const;
  const TokenizerConfig& config() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  // from_json and from_documents: `*_text` is the document's text when there is one, so that
  // errors give a line and column.
  // `tables`: the model's vocabulary and merges, when `root` does not hold them (from_gguf).
  static Tokenizer build(const nlohmann::json& root, std::string_view root_text,
                         std::string_view source_name, const nlohmann::json& config,
                         std::string_view config_text, std::string_view config_source_name,
                         const BpeTables* tables = nullptr);
  std::unique_ptr<Impl> impl_;
};

// Turns ids arriving one at a time into text. Each piece returned ends on a whole UTF-8
// character, and the pieces concatenated equal decode(all ids) without clean-up: pending bytes
// of an incomplete character wait for the ids that complete them.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  // The text that `id` completes; often empty while a character is incomplete.
  std::string push(int32_t id);
  // Whatever is still pending (an incomplete character decodes as U+FFFD).
  std::string finish();

 private:
  std::string decode_range(size_t begin, size_t end) const;

  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  std::vector<int32_t> ids_;
  // ids_[prefix_offset_, read_offset_) were already emitted and are kept as context (decoders
  // such as Metaspace treat the first token differently); ids_[read_offset_, end) are pending.
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
};

}  // namespace prism::llm
