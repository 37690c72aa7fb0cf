// Decoders (token strings back to text) and post-processors (special tokens around a sequence)
// of tokenizer.json.
#include <fmt/format.h>

#include "prism/core/error.h"
#include "prism/llm/regex.h"
#include "prism/llm/tokenizer_pipeline.h"
#include "prism/llm/unicode.h"

namespace prism::llm::pipeline {

using nlohmann::json;

std::string clean_up_tokenization(std::string text) {
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    std::string out;
    size_t last = 0, pos;
    while ((pos = text.find(from, last)) != std::string::npos) {
      out.append(text, last, pos - last);
      out += to;
      last = pos + from.size();
    }
    out.append(text, last);
    text = std::move(out);
  }
  return text;
}

namespace {

// ByteLevel: each character of GPT-2's alphabet back to its byte, then the bytes as UTF-8 (an
// invalid sequence becomes U+FFFD). Added tokens, and any token with a character outside the
// alphabet, pass through as they are.
class ByteLevelDecoder final : public Decoder {
 public:
  explicit ByteLevelDecoder(const std::unordered_set<std::string>& added_tokens)
      : added_tokens_(added_tokens) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    const auto& alphabet = unicode::byte_level_alphabet();
    std::string bytes;
    for (const std::string& token : tokens) {
      if (added_tokens_.count(token)) {
        bytes += token;
        continue;
      }
      size_t mark = bytes.size();
      size_t pos = 0;
      while (pos < token.size()) {
        char32_t c = unicode::next_code_point(token, pos);
        int byte = c < alphabet.code_point_to_byte.size() ? alphabet.code_point_to_byte[c] : -1;
        if (byte < 0) {
          bytes.resize(mark);
          bytes += token;
          break;
        }
        bytes += static_cast<char>(byte);
      }
    }
    return {unicode::to_valid_utf8(bytes)};
  }

 private:
  std::unordered_set<std::string> added_tokens_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(const json& node, const JsonPath& where) {
    replacement_ = optional_string(node, "replacement", "\u2581", where);
    std::string scheme = optional_string(
        node, "prepend_scheme",
        optional_bool(node, "add_prefix_space", true, where) ? "always" : "never", where);
    strip_first_space_ = scheme != "never";
  }
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& token = tokens[i];
      size_t pos = 0, found;
      while ((found = token.find(replacement_, pos)) != std::string::npos) {
        out.append(token, pos, found - pos);
        out += ' ';
        pos = found + replacement_.size();
      }
      out.append(token, pos);
      if (i == 0 && strip_first_space_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  std::string replacement_;
  bool strip_first_space_ = true;
};

// ByteFallback: runs of <0xAB> tokens become the bytes they name, as UTF-8 text; a run that is not
// valid UTF-8 becomes one U+FFFD per byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      std::string valid = unicode::to_valid_utf8(pending);
      if (valid == pending) {
        out.push_back(std::move(pending));
      } else {
        for (size_t i = 0; i < pending_count; ++i) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
      pending_count = 0;
    };
    for (std::string& token : tokens) {
      unsigned value = 0;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
          std::sscanf(token.c_str() + 3, "%2x", &value) == 1) {
        pending += static_cast<char>(value);
        ++pending_count;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    return out;
  }
};

class FuseDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string joined;
    for (const auto& token : tokens) joined += token;
    return {joined};
  }
};

// Strip: removes up to `start` leading and `stop` trailing copies of one character per token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& token : tokens) {
      size_t begin = 0, end = token.size();
      for (size_t i = 0; i < start_ && token.compare(begin, content_.size(), content_) == 0; ++i) {
        begin += content_.size();
      }
      for (size_t i = 0; i < stop_ && end >= begin + content_.size() &&
                         token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      token = token.substr(begin, end - begin);
    }
    return tokens;
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Regex regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& token : tokens) {
      std::string out;
      size_t last = 0;
      for (const Match& m : regex_.find_all(token)) {
        out.append(token, last, m.begin - last);
        out += content_;
        last = m.end;
      }
      out.append(token, last);
      token = std::move(out);
    }
    return tokens;
  }

 private:
  Regex regex_;
  std::string content_;
};

// WordPiece: continuation pieces lose their prefix, other pieces get a space before them.
class WordPieceDecoder final : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& token = tokens[i];
      if (i > 0) {
        if (token.compare(0, prefix_.size(), prefix_) == 0) {
          token.erase(0, prefix_.size());
        } else {
          token.insert(0, 1, ' ');
        }
      }
      if (cleanup_) token = clean_up_tokenization(std::move(token));
    }
    return tokens;
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> stages)
      : stages_(std::move(stages)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& stage : stages_) tokens = stage->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> stages_;
};

size_t optional_count(const json& node, std::string_view key, const JsonPath& where) {
  auto it = node.find(key);
  if (it == node.end() || it->is_null()) return 0;
  if (!it->is_number_unsigned()) fail("{}: expected a count", (where / key).str());
  return it->get<size_t>();
}

// Post-processors.

class TemplateProcessing final : public PostProcessor {
 public:
  TemplateProcessing(const json& node, const JsonPath& where) {
    const json& single = require(node, "single", where);
    const json& specials = require(node, "special_tokens", where);
    if (!single.is_array()) fail("{}: expected a list", (where / "single").str());
    if (!specials.is_object()) fail("{}: expected an object", (where / "special_tokens").str());
    for (size_t i = 0; i < single.size(); ++i) {
      const json& item = single[i];
      JsonPath item_path = (where / "single")[i];
      if (item.contains("Sequence")) {
        pieces_.push_back({});
        pieces_.back().is_sequence = true;
      } else if (item.contains("SpecialToken")) {
        std::string name = require_string(item["SpecialToken"], "id", item_path / "SpecialToken");
        if (!specials.contains(name)) {
          fail("{}: special token \"{}\" is not in special_tokens", item_path.str(), name);
        }
        const JsonPath ids_path = where / "special_tokens" / name / "ids";
        const json& ids = require(specials[name], "ids", where / "special_tokens" / name);
        if (!ids.is_array()) fail("{}: expected a list of token ids", ids_path.str());
        Piece piece;
        for (size_t j = 0; j < ids.size(); ++j) piece.ids.push_back(token_id(ids[j], ids_path[j]));
        pieces_.push_back(std::move(piece));
      } else {
        fail("{}: expected \"Sequence\" or \"SpecialToken\"", item_path.str());
      }
    }
  }
  void process(std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const Piece& piece : pieces_) {
      if (piece.is_sequence) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        out.insert(out.end(), piece.ids.begin(), piece.ids.end());
      }
    }
    ids = std::move(out);
  }

 private:
  struct Piece {
    bool is_sequence = false;
    std::vector<int32_t> ids;
  };
  std::vector<Piece> pieces_;
};

// BertProcessing / RobertaProcessing for one sequence: cls, the sequence, sep.
class SurroundProcessing final : public PostProcessor {
 public:
  SurroundProcessing(const json& node, const JsonPath& where)
      : cls_(pair_id(node, "cls", where)), sep_(pair_id(node, "sep", where)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), cls_);
    ids.push_back(sep_);
  }

 private:
  // "cls": ["[CLS]", 101]: the token and its id.
  static int32_t pair_id(const json& node, std::string_view key, const JsonPath& where) {
    const json& pair = require(node, key, where);
    if (!pair.is_array() || pair.size() != 2) {
      fail("{}: expected [token, id]", (where / key).str());
    }
    return token_id(pair[1], (where / key)[1]);
  }
  int32_t cls_, sep_;
};

class NoProcessing final : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
};

class SequenceProcessing final : public PostProcessor {
 public:
  explicit SequenceProcessing(std::vector<std::unique_ptr<PostProcessor>> stages)
      : stages_(std::move(stages)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& stage : stages_) stage->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> stages_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const json& node, const JsonPath& where,
                                      const std::unordered_set<std::string>& added_tokens) {
  if (node.is_null()) return nullptr;
  std::string type = require_string(node, "type", where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>(added_tokens);
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(node, where);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(require_string(node, "content", where),
                                          optional_count(node, "start", where),
                                          optional_count(node, "stop", where));
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(pattern_regex(node, where),
                                            require_string(node, "content", where));
  }
  if (type == "WordPiece") {
    return std::make_unique<WordPieceDecoder>(optional_string(node, "prefix", "##", where),
                                              optional_bool(node, "cleanup", true, where));
  }
  if (type == "Sequence") {
    const json& list = require(node, "decoders", where);
    if (!list.is_array()) fail("{}: expected a list", (where / "decoders").str());
    std::vector<std::unique_ptr<Decoder>> stages;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto stage = make_decoder(list[i], (where / "decoders")[i], added_tokens)) {
        stages.push_back(std::move(stage));
      }
    }
    return std::make_unique<SequenceDecoder>(std::move(stages));
  }
  fail("{}: unsupported decoder type \"{}\"", where.str(), type);
}

std::unique_ptr<PostProcessor> make_post_processor(const json& node, const JsonPath& where) {
  if (node.is_null()) return nullptr;
  std::string type = require_string(node, "type", where);
  if (type == "TemplateProcessing") return std::make_unique<TemplateProcessing>(node, where);
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    return std::make_unique<SurroundProcessing>(node, where);
  }
  if (type == "ByteLevel") return std::make_unique<NoProcessing>();
  if (type == "Sequence") {
    const json& list = require(node, "processors", where);
    if (!list.is_array()) fail("{}: expected a list", (where / "processors").str());
    std::vector<std::unique_ptr<PostProcessor>> stages;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto stage = make_post_processor(list[i], (where / "processors")[i])) {
        stages.push_back(std::move(stage));
      }
    }
    return std::make_unique<SequenceProcessing>(std::move(stages));
  }
  fail("{}: unsupported post_processor type \"{}\"", where.str(), type);
}

}  // namespace prism::llm::pipeline
