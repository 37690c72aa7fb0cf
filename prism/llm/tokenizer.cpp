// Tokenizer: tokenizer.json's pipeline put together, plus added tokens and tokenizer_config.json.
#include "prism/llm/tokenizer.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include "prism/core/error.h"
#include "prism/io/gguf.h"
#include "prism/io/vfs.h"
#include "prism/llm/bpe.h"
#include "prism/llm/json_file.h"
#include "prism/llm/tokenizer_pipeline.h"
#include "prism/llm/unicode.h"

namespace prism::llm {

using nlohmann::json;
using pipeline::JsonPath;

namespace {

// Finds added tokens in text, leftmost first and longest among those starting at one place (what
// Hugging Face's Aho-Corasick matcher does), honouring single_word, lstrip and rstrip.
class AddedTokenMatcher {
 public:
  void add(const AddedToken* token, std::string content) {
    if (content.empty()) return;
    auto& bucket = by_first_byte_[static_cast<unsigned char>(content[0])];
    bucket.push_back({token, std::move(content)});
    std::stable_sort(bucket.begin(), bucket.end(), [](const Entry& a, const Entry& b) {
      return a.content.size() > b.content.size();
    });
    empty_ = false;
  }
  bool empty() const { return empty_; }

  struct Found {
    size_t begin, end;  // including stripped whitespace
    const AddedToken* token;
  };
  std::vector<Found> find_all(std::string_view text) const {
    std::vector<Found> found;
    if (empty_) return found;
    size_t pos = 0;
    size_t previous_end = 0;
    while (pos < text.size()) {
      const auto& bucket = by_first_byte_[static_cast<unsigned char>(text[pos])];
      const Entry* hit = nullptr;
      for (const Entry& entry : bucket) {
        if (text.compare(pos, entry.content.size(), entry.content) != 0) continue;
        if (entry.token->single_word && !is_word_boundary(text, pos, pos + entry.content.size())) {
          continue;
        }
        hit = &entry;
        break;
      }
      if (!hit) {
        ++pos;
        continue;
      }
      size_t begin = pos, end = pos + hit->content.size();
      if (hit->token->lstrip) {
        while (begin > previous_end && is_space_before(text, begin))
          begin = char_before(text, begin);
      }
      if (hit->token->rstrip) {
        while (end < text.size()) {
          size_t next = end;
          if (!unicode::is_whitespace(unicode::next_code_point(text, next))) break;
          end = next;
        }
      }
      found.push_back({begin, end, hit->token});
      previous_end = end;
      pos = end;
    }
    return found;
  }

 private:
  struct Entry {
    const AddedToken* token;
    std::string content;
  };
  static size_t char_before(std::string_view text, size_t pos) {
    do {
      --pos;
    } while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80);
    return pos;
  }
  static bool is_space_before(std::string_view text, size_t pos) {
    size_t start = char_before(text, pos);
    return unicode::is_whitespace(unicode::next_code_point(text, start));
  }
  static bool is_word_char(char32_t c) { return unicode::is_alphanumeric(c) || c == '_'; }
  static bool is_word_boundary(std::string_view text, size_t begin, size_t end) {
    if (begin > 0) {
      size_t start = char_before(text, begin);
      if (is_word_char(unicode::next_code_point(text, start))) return false;
    }
    if (end < text.size()) {
      size_t next = end;
      if (is_word_char(unicode::next_code_point(text, next))) return false;
    }
    return true;
  }

  std::array<std::vector<Entry>, 256> by_first_byte_;
  bool empty_ = true;
};

std::string token_string(const json& value, const JsonPath& where) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  fail("{}: expected a token string or {{\"content\": ...}}", where.str());
}

}  // namespace

struct Tokenizer::Impl {
  std::unique_ptr<pipeline::Normalizer> normalizer;
  std::unique_ptr<pipeline::PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<pipeline::PostProcessor> post_processor;
  std::unique_ptr<pipeline::Decoder> decoder;
  std::vector<AddedToken> added_tokens;
  std::unordered_map<int32_t, size_t> added_by_id;
  StringToId added_by_content;
  AddedTokenMatcher raw_matcher;         // tokens matched before normalization
  AddedTokenMatcher normalized_matcher;  // tokens matched in normalized text
  TokenizerConfig config;

  void encode_segment(std::string_view text, bool at_input_start, std::vector<int32_t>& ids) const;
  void encode_normalized(std::string_view text, bool at_input_start,
                         std::vector<int32_t>& ids) const;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(std::string_view location) {
  // Any VFS location: a local path, https://, hf://org/repo or s3://bucket/prefix.
  std::string where(location);
  if (where.rfind("file://", 0) == 0) where = where.substr(7);
  if (where.ends_with(".gguf")) {
    auto file = io::open(where);
    return from_gguf(io::GgufHeader::read(*file));
  }
  bool is_file = where.size() >= 5 && where.compare(where.size() - 5, 5, ".json") == 0;
  std::string dir = is_file ? std::string(io::parent_of(where)) : where;
  std::string tokenizer_uri = is_file ? where : io::join(where, "tokenizer.json");
  if (!io::exists(tokenizer_uri)) fail("{}: no tokenizer.json there", location);
  std::string config_uri = io::join(dir, "tokenizer_config.json");
  std::string config_text = io::exists(config_uri) ? io::read_text(config_uri) : "";
  Tokenizer tokenizer =
      from_json(io::read_text(tokenizer_uri), tokenizer_uri, config_text, config_uri);
  // Newer checkpoints keep the template in its own file, which then takes precedence.
  std::string template_uri = io::join(dir, "chat_template.jinja");
  if (io::exists(template_uri)) {
    tokenizer.impl_->config.chat_template = io::read_text(template_uri);
    tokenizer.impl_->config.chat_template_source = template_uri;
  }
  return tokenizer;
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view source_name,
                               std::string_view config_json, std::string_view config_source_name) {
  const json config = config_json.empty() ? json() : parse_json(config_json, config_source_name);
  // The BPE model's tables read as they stream past (a third of the time of a whole document);
  // a document not read that way is parsed whole, for the errors that say what is wrong.
  if (const std::optional<TokenizerJson> parsed = parse_tokenizer_json(tokenizer_json)) {
    const BpeTables tables = parsed->tables();
    return build(parsed->root, tokenizer_json, source_name, config, config_json, config_source_name,
                 &tables);
  }
  const json root = parse_json(tokenizer_json, source_name);
  return build(root, tokenizer_json, source_name, config, config_json, config_source_name);
}

Tokenizer Tokenizer::from_documents(const nlohmann::json& tokenizer, std::string_view source_name,
                                    const nlohmann::json& config,
                                    std::string_view config_source_name) {
  return build(tokenizer, {}, source_name, config, {}, config_source_name);
}

Tokenizer Tokenizer::build(const json& root, std::string_view root_text,
                           std::string_view source_name, const json& config_document,
                           std::string_view config_text, std::string_view config_source_name,
                           const BpeTables* tables) {
  auto impl = std::make_unique<Impl>();
  JsonPath top{std::string(source_name), "", root_text};
  if (!root.is_object()) fail("{}: expected a JSON object at the top", source_name);

  impl->model =
      std::make_unique<BpeModel>(pipeline::require(root, "model", top), top / "model", tables);
  auto stage = [&](const char* key) -> const json& {
    static const json null;
    auto it = root.find(key);
    return it == root.end() ? null : *it;
  };
  impl->normalizer = pipeline::make_normalizer(stage("normalizer"), top / "normalizer");
  impl->pre_tokenizer = pipeline::make_pre_tokenizer(stage("pre_tokenizer"), top / "pre_tokenizer");
  impl->post_processor =
      pipeline::make_post_processor(stage("post_processor"), top / "post_processor");

  const json& added = stage("added_tokens");
  if (!added.is_null() && !added.is_array())
    fail("{}: expected a list", (top / "added_tokens").str());
  for (size_t i = 0; !added.is_null() && i < added.size(); ++i) {
    JsonPath at = (top / "added_tokens")[i];
    const json& node = added[i];
    AddedToken token;
    const json& id = pipeline::require(node, "id", at);
    token.id = pipeline::token_id(id, at / "id");
    token.content = pipeline::require_string(node, "content", at);
    token.special = pipeline::optional_bool(node, "special", false, at);
    token.lstrip = pipeline::optional_bool(node, "lstrip", false, at);
    token.rstrip = pipeline::optional_bool(node, "rstrip", false, at);
    token.normalized = pipeline::optional_bool(node, "normalized", !token.special, at);
    token.single_word = pipeline::optional_bool(node, "single_word", false, at);
    impl->added_tokens.push_back(std::move(token));
  }
  std::unordered_set<std::string> added_contents;
  for (size_t i = 0; i < impl->added_tokens.size(); ++i) {
    const AddedToken& token = impl->added_tokens[i];
    impl->added_by_id[token.id] = i;
    impl->added_by_content.emplace(token.content, token.id);
    added_contents.insert(token.content);
    if (token.normalized && impl->normalizer) {
      impl->normalized_matcher.add(&token, impl->normalizer->normalize(token.content));
    } else if (token.normalized) {
      impl->normalized_matcher.add(&token, token.content);
    } else {
      impl->raw_matcher.add(&token, token.content);
    }
  }
  impl->decoder = pipeline::make_decoder(stage("decoder"), top / "decoder", added_contents);

  TokenizerConfig& config = impl->config;
  if (!config_document.is_null()) {
    config.raw = config_document;
    JsonPath ctop{std::string(config_source_name), "", config_text};
    if (!config.raw.is_object()) fail("{}: expected a JSON object at the top", config_source_name);
    config.chat_template_source = std::string(config_source_name);
    if (auto it = config.raw.find("chat_template"); it != config.raw.end() && !it->is_null()) {
      if (it->is_string()) {
        config.chat_template = it->get<std::string>();
      } else if (it->is_array()) {
        // Several named templates: the one called "default" is what apply_chat_template uses.
        for (size_t i = 0; i < it->size(); ++i) {
          const json& named = (*it)[i];
          const JsonPath at = (ctop / "chat_template")[i];
          if (!named.is_object())
            fail("{}: expected {{\"name\": ..., \"template\": ...}}", at.str());
          if (pipeline::optional_string(named, "name", "", at) == "default") {
            config.chat_template = pipeline::optional_string(named, "template", "", at);
          }
        }
      } else {
        fail("{}: expected a string or a list of named templates", (ctop / "chat_template").str());
      }
    }
    for (const auto& [key, value] : config.raw.items()) {
      bool named_token = key.size() > 6 && key.compare(key.size() - 6, 6, "_token") == 0;
      if (named_token && (value.is_string() || value.is_object())) {
        config.special_tokens.emplace_back(key, token_string(value, ctop / key));
      }
    }
    config.clean_up_tokenization_spaces =
        pipeline::optional_bool(config.raw, "clean_up_tokenization_spaces", false, ctop);
  }
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::encode_normalized(std::string_view text, bool at_input_start,
                                        std::vector<int32_t>& ids) const {
  if (!pre_tokenizer) {
    model->tokenize(text, ids);
    return;
  }
  pre_tokenizer->pre_tokenize(text, at_input_start,
                              [&](std::string_view piece, bool) { model->tokenize(piece, ids); });
}

void Tokenizer::Impl::encode_segment(std::string_view text, bool at_input_start,
                                     std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  std::string normalized =
      normalizer ? normalizer->normalize(std::string(text)) : std::string(text);
  if (normalized_matcher.empty()) {
    encode_normalized(normalized, at_input_start, ids);
    return;
  }
  size_t last = 0;
  for (const auto& found : normalized_matcher.find_all(normalized)) {
    if (found.begin > last) {
      encode_normalized(std::string_view(normalized).substr(last, found.begin - last),
                        at_input_start && last == 0, ids);
    }
    ids.push_back(found.token->id);
    last = found.end;
  }
  if (last < normalized.size()) {
    encode_normalized(std::string_view(normalized).substr(last), at_input_start && last == 0, ids);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  unicode::validate_utf8(text, "tokenizer input");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  size_t last = 0;
  for (const auto& found : impl_->raw_matcher.find_all(text)) {
    if (found.begin > last)
      impl_->encode_segment(text.substr(last, found.begin - last), last == 0, ids);
    ids.push_back(found.token->id);
    last = found.end;
  }
  if (last < text.size()) impl_->encode_segment(text.substr(last), last == 0, ids);
  if (options.add_special_tokens && impl_->post_processor) impl_->post_processor->process(ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) {
      const AddedToken& token = impl_->added_tokens[it->second];
      if (!(options.skip_special_tokens && token.special)) tokens.push_back(token.content);
      continue;
    }
    const std::string* token = impl_->model->id_to_token(id);
    if (!token) fail("decode: token id {} is not in the vocabulary (size {})", id, vocab_size());
    tokens.push_back(*token);
  }
  std::string text;
  if (impl_->decoder) {
    for (const std::string& piece : impl_->decoder->decode_chain(std::move(tokens))) text += piece;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) text += ' ';
      text += tokens[i];
    }
  }
  // Every model prism reads is BPE, for which Hugging Face leaves the clean-up out by default.
  if (options.clean_up_tokenization_spaces.value_or(false)) {
    text = pipeline::clean_up_tokenization(std::move(text));
  }
  return text;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) {
    return it->second;
  }
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) {
    return impl_->added_tokens[it->second].content;
  }
  const std::string* token = impl_->model->id_to_token(id);
  if (!token) fail("token id {} is not in the vocabulary (size {})", id, vocab_size());
  return *token;
}

bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added_tokens[it->second].special;
}

size_t Tokenizer::vocab_size() const {
  size_t size = impl_->model->vocab_size();
  for (const AddedToken& token : impl_->added_tokens) {
    size = std::max(size, static_cast<size_t>(token.id) + 1);
  }
  return size;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added_tokens; }
const TokenizerConfig& Tokenizer::config() const { return impl_->config; }

// StreamingDetokenizer

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer) {
  options_.skip_special_tokens = skip_special_tokens;
  options_.clean_up_tokenization_spaces = false;
}

std::string StreamingDetokenizer::decode_range(size_t begin, size_t end) const {
  return tokenizer_->decode(std::span(ids_).subspan(begin, end - begin), options_);
}

std::string StreamingDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  std::string emitted = decode_range(prefix_offset_, read_offset_);
  std::string all = decode_range(prefix_offset_, ids_.size());
  // A trailing U+FFFD means the last character is still incomplete: wait for more ids.
  bool incomplete = all.size() >= 3 && all.compare(all.size() - 3, 3, "\xEF\xBF\xBD") == 0;
  if (incomplete || all.size() <= emitted.size() || all.compare(0, emitted.size(), emitted) != 0) {
    return {};
  }
  std::string fresh = all.substr(emitted.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  // Keep only the context still needed, so pushes stay cheap on long streams.
  if (prefix_offset_ > 0) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_));
    read_offset_ -= prefix_offset_;
    prefix_offset_ = 0;
  }
  return fresh;
}

std::string StreamingDetokenizer::finish() {
  std::string emitted = decode_range(prefix_offset_, read_offset_);
  std::string all = decode_range(prefix_offset_, ids_.size());
  ids_.clear();
  prefix_offset_ = read_offset_ = 0;
  if (all.size() <= emitted.size() || all.compare(0, emitted.size(), emitted) != 0) return {};
  return all.substr(emitted.size());
}

}  // namespace prism::llm
