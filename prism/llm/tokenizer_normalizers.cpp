// Normalizers of tokenizer.json, and the JSON helpers every pipeline stage uses.
#include <fmt/format.h>
#include <utf8proc.h>

#include "prism/core/error.h"
#include "prism/llm/json_file.h"
#include "prism/llm/regex.h"
#include "prism/llm/tokenizer_pipeline.h"
#include "prism/llm/unicode.h"

namespace prism::llm::pipeline {

using nlohmann::json;

JsonPath JsonPath::operator/(std::string_view key) const {
  return {file, path.empty() ? std::string(key) : fmt::format("{}.{}", path, key), text};
}

JsonPath JsonPath::operator[](size_t index) const {
  return {file, fmt::format("{}[{}]", path, index), text};
}

std::string JsonPath::str() const {
  if (path.empty()) return file;
  if (!text.empty()) {
    if (auto at = locate_json_path(text, path)) {
      return fmt::format("{}:{}:{}: {}", file, at->line, at->column, path);
    }
  }
  return file + ": " + path;
}

const json& require(const json& node, std::string_view key, const JsonPath& where) {
  if (!node.is_object()) fail("{}: expected an object", where.str());
  auto it = node.find(key);
  if (it == node.end()) fail("{}: missing field \"{}\"", where.str(), key);
  return *it;
}

std::string require_string(const json& node, std::string_view key, const JsonPath& where) {
  const json& value = require(node, key, where);
  if (!value.is_string()) fail("{}: expected a string", (where / key).str());
  return value.get<std::string>();
}

bool optional_bool(const json& node, std::string_view key, bool fallback, const JsonPath& where) {
  auto it = node.find(key);
  if (it == node.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail("{}: expected true or false", (where / key).str());
  return it->get<bool>();
}

int32_t token_id(const json& id, const JsonPath& where) {
  if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
      (id.is_number_unsigned() ? id.get<uint64_t>() > static_cast<uint64_t>(kMaxTokenId)
                               : id.get<int64_t>() > kMaxTokenId)) {
    fail("{}: expected a token id (an integer from 0 to {}), got {}", where.str(), kMaxTokenId,
         id.dump());
  }
  return static_cast<int32_t>(id.get<int64_t>());
}

std::string optional_string(const json& node, std::string_view key, std::string_view fallback,
                            const JsonPath& where) {
  auto it = node.find(key);
  if (it == node.end() || it->is_null()) return std::string(fallback);
  if (!it->is_string()) fail("{}: expected a string", (where / key).str());
  return it->get<std::string>();
}

Regex pattern_regex(const json& node, const JsonPath& where) {
  const json& pattern = require(node, "pattern", where);
  if (pattern.contains("String") && pattern["String"].is_string()) {
    return Regex(regex_escape(pattern["String"].get<std::string>()), where.str());
  }
  if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
    return Regex(pattern["Regex"].get<std::string>(), where.str());
  }
  fail("{}: pattern must hold \"String\" or \"Regex\"", (where / "pattern").str());
}

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalForm form) : form_(form) {}
  std::string normalize(std::string text) const override { return unicode::normalize(text, form_); }

 private:
  unicode::NormalForm form_;
};

class Lowercase final : public Normalizer {
 public:
  std::string normalize(std::string text) const override { return unicode::to_lower(text); }
};

// Replace: a literal string or a regex, every occurrence.
class Replace final : public Normalizer {
 public:
  Replace(const json& node, const JsonPath& where)
      : regex_(pattern_regex(node, where)), content_(require_string(node, "content", where)) {}
  std::string normalize(std::string text) const override {
    std::string out;
    size_t last = 0;
    for (const Match& m : regex_.find_all(text)) {
      out.append(text, last, m.begin - last);
      out += content_;
      last = m.end;
    }
    out.append(text, last);
    return out;
  }

 private:
  Regex regex_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string text) const override {
    return text.empty() ? text : prefix_ + text;
  }

 private:
  std::string prefix_;
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t pos = begin;
        if (!unicode::is_whitespace(unicode::next_code_point(text, pos))) break;
        begin = pos;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t pos = start;
        if (!unicode::is_whitespace(unicode::next_code_point(text, pos))) break;
        end = start;
      }
    }
    return text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

// Removes combining marks: all of them (Mn, Mc, Me), or only the non-spacing ones (Mn), which is
// what BertNormalizer strips.
std::string strip_marks(const std::string& text, bool nonspacing_only) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t c = unicode::next_code_point(text, pos);
    auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    bool mark = nonspacing_only
                    ? category == UTF8PROC_CATEGORY_MN
                    : category >= UTF8PROC_CATEGORY_MN && category <= UTF8PROC_CATEGORY_ME;
    if (!mark) unicode::append_utf8(out, c);
  }
  return out;
}

// StripAccents: meant to follow NFD or NFKD.
class StripAccents final : public Normalizer {
 public:
  std::string normalize(std::string text) const override { return strip_marks(text, false); }
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> stages) : stages_(std::move(stages)) {}
  std::string normalize(std::string text) const override {
    for (const auto& stage : stages_) text = stage->normalize(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> stages_;
};

// BertNormalizer: drop control characters, map whitespace to ' ', pad CJK ideographs with
// spaces, optionally strip accents and lowercase.
class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(const json& node, const JsonPath& where)
      : clean_text_(optional_bool(node, "clean_text", true, where)),
        handle_chinese_chars_(optional_bool(node, "handle_chinese_chars", true, where)),
        lowercase_(optional_bool(node, "lowercase", true, where)) {
    auto it = node.find("strip_accents");
    strip_accents_ = (it == node.end() || it->is_null()) ? lowercase_ : it->get<bool>();
  }
  std::string normalize(std::string text) const override {
    std::string out;
    size_t pos = 0;
    while (pos < text.size()) {
      char32_t c = unicode::next_code_point(text, pos);
      if (clean_text_) {
        if (c == 0 || c == 0xFFFD) continue;
        // Control, format and private-use characters go; unassigned code points stay (Hugging
        // Face's test for "other" characters does not see them).
        auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
        bool control = category == UTF8PROC_CATEGORY_CC || category == UTF8PROC_CATEGORY_CF ||
                       category == UTF8PROC_CATEGORY_CO;
        if (c != '\t' && c != '\n' && c != '\r' && control) continue;
        if (unicode::is_whitespace(c)) c = ' ';
      }
      // Hugging Face's ranges, which leave out U+2B820..U+2B91F (BERT's own do not).
      bool chinese = (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
                     (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B81F) ||
                     (c >= 0x2B920 && c <= 0x2CEAF) || (c >= 0xF900 && c <= 0xFAFF) ||
                     (c >= 0x2F800 && c <= 0x2FA1F);
      if (handle_chinese_chars_ && chinese) {
        out += ' ';
        unicode::append_utf8(out, c);
        out += ' ';
      } else {
        unicode::append_utf8(out, c);
      }
    }
    if (strip_accents_) {
      out = strip_marks(unicode::normalize(out, unicode::NormalForm::NFD), true);
    }
    if (lowercase_) out = unicode::to_lower(out);
    return out;
  }

 private:
  bool clean_text_, handle_chinese_chars_, lowercase_, strip_accents_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& node, const JsonPath& where) {
  if (node.is_null()) return nullptr;
  std::string type = require_string(node, "type", where);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::NFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Replace") return std::make_unique<Replace>(node, where);
  if (type == "Prepend") return std::make_unique<Prepend>(require_string(node, "prepend", where));
  if (type == "Strip") {
    return std::make_unique<Strip>(optional_bool(node, "strip_left", true, where),
                                   optional_bool(node, "strip_right", true, where));
  }
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "BertNormalizer") return std::make_unique<BertNormalizer>(node, where);
  if (type == "Sequence") {
    const json& list = require(node, "normalizers", where);
    if (!list.is_array()) fail("{}: expected a list", (where / "normalizers").str());
    std::vector<std::unique_ptr<Normalizer>> stages;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto stage = make_normalizer(list[i], (where / "normalizers")[i])) {
        stages.push_back(std::move(stage));
      }
    }
    return std::make_unique<Sequence>(std::move(stages));
  }
  fail("{}: unsupported normalizer type \"{}\"", where.str(), type);
}

}  // namespace prism::llm::pipeline
