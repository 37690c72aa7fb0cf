#include "prism/serve/tool_calls.h"

#include <cctype>
#include <nlohmann/json.hpp>
#include <optional>

namespace prism::serve {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
constexpr std::string_view kPythonicOpen = "<|tool_call_start|>",
                           kPythonicClose = "<|tool_call_end|>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

// A JSON value's text; bytes of a string that are not UTF-8 (a model's text may hold any)
// become U+FFFD rather than an exception.
std::string text_of(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool blank(std::string_view s) {
  for (const char c : s) {
    if (!std::isspace(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<Json> parse_json(std::string_view s) {
  Json j = Json::parse(s, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// A call from {"name": ..., `key`: {...}} (the arguments an object, or a string holding one).
std::optional<ToolCall> call_of(const Json& j, std::initializer_list<const char*> keys) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  ToolCall call{j["name"].get<std::string>(), "{}"};
  for (const char* key : keys) {
    if (!j.contains(key)) continue;
    Json args = j[key];
    if (args.is_string()) {
      std::optional<Json> parsed = parse_json(args.get<std::string>());
      if (!parsed) return std::nullopt;
      args = std::move(*parsed);
    }
    if (!args.is_object()) return std::nullopt;
    call.arguments = text_of(args);
    break;
  }
  return call;
}

// Where a marker starts in `text`, or the start of a prefix of it that ends the text.
size_t marker_start(std::string_view text, std::string_view marker) {
  if (const size_t at = text.find(marker); at != std::string_view::npos) return at;
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return text.size() - n;
  }
  return std::string_view::npos;
}

// Calls between `open` and `close` markers, each block's inside read by `read` (which may
// give several); the text outside the blocks is the content.
template <typename Read>
ToolCallAnswer between_markers(std::string_view text, std::string_view open, std::string_view close,
                               Read&& read) {
  ToolCallAnswer answer;
  size_t at = 0;
  while (true) {
    const size_t start = text.find(open, at);
    if (start == std::string_view::npos) break;
    const size_t end = text.find(close, start + open.size());
    if (end == std::string_view::npos) return {std::string(text), {}};  // cut off
    answer.content += text.substr(at, start - at);
    if (!read(text.substr(start + open.size(), end - start - open.size()), answer.calls)) {
      return {std::string(text), {}};
    }
    at = end + close.size();
  }
  if (answer.calls.empty()) return {std::string(text), {}};
  answer.content += text.substr(at);
  if (blank(answer.content)) answer.content.clear();
  return answer;
}

// --- Python literals (LFM 2's calls) as JSON.
class Pythonic {
 public:
  explicit Pythonic(std::string_view s) : s_(s) {}

  // [name(key=value, ...), ...] and nothing after it.
  bool calls(std::vector<ToolCall>& out) {
    if (!eat('[')) return false;
    if (eat(']')) return false;
    do {
      std::optional<ToolCall> call = one_call();
      if (!call) return false;
      out.push_back(std::move(*call));
    } while (eat(','));
    if (!eat(']')) return false;
    space();
    return i_ == s_.size();
  }

 private:
  std::optional<ToolCall> one_call() {
    space();
    const size_t from = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_' ||
                              s_[i_] == '.' || s_[i_] == '-')) {
      ++i_;
    }
    ToolCall call{std::string(s_.substr(from, i_ - from)), ""};
    if (call.name.empty() || !eat('(')) return std::nullopt;
    Json args = Json::object();
    if (!eat(')')) {
      do {
        space();
        const size_t key = i_;
        while (i_ < s_.size() &&
               (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) {
          ++i_;
        }
        const std::string name(s_.substr(key, i_ - key));
        if (name.empty() || !eat('=')) return std::nullopt;  // positional arguments: no names
        std::optional<Json> v = value();
        if (!v) return std::nullopt;
        args[name] = std::move(*v);
      } while (eat(','));
      if (!eat(')')) return std::nullopt;
    }
    call.arguments = text_of(args);
    return call;
  }

  std::optional<Json> value() {
    space();
    if (i_ >= s_.size()) return std::nullopt;
    const char c = s_[i_];
    if (c == '\'' || c == '"') return string();
    // Containers nest up to a depth: a model's text must not run the parser out of stack.
    if ((c == '[' || c == '(' || c == '{') && depth_ == kMaxDepth) return std::nullopt;
    if (c == '[' || c == '(') return nested([&] { return sequence(c == '[' ? ']' : ')'); });
    if (c == '{') return nested([&] { return mapping(); });
    for (auto [word, v] : {std::pair{"True", Json(true)}, std::pair{"False", Json(false)},
                           std::pair{"None", Json(nullptr)}}) {
      if (s_.substr(i_).starts_with(word)) {
        i_ += std::string_view(word).size();
        return v;
      }
    }
    const size_t from = i_;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) ||
                              std::string_view("+-.eE").find(s_[i_]) != std::string_view::npos)) {
      ++i_;
    }
    if (i_ == from) return std::nullopt;
    std::optional<Json> n = parse_json(s_.substr(from, i_ - from));
    if (!n || !n->is_number()) return std::nullopt;
    return n;
  }

  std::optional<Json> string() {
    const char quote = s_[i_++];
    std::string out;
    while (i_ < s_.size() && s_[i_] != quote) {
      char c = s_[i_++];
      if (c == '\\' && i_ < s_.size()) {
        const char e = s_[i_++];
        c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      }
      out += c;
    }
    if (i_ >= s_.size()) return std::nullopt;
    ++i_;
    return Json(out);
  }

  std::optional<Json> sequence(char close) {
    ++i_;
    Json out = Json::array();
    while (!eat(close)) {
      std::optional<Json> v = value();
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
      if (!eat(',')) {
        if (!eat(close)) return std::nullopt;
        break;
      }
    }
    return out;
  }

  std::optional<Json> mapping() {
    ++i_;
    Json out = Json::object();
    while (!eat('}')) {
      space();
      if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return std::nullopt;
      std::optional<Json> key = string();
      if (!key || !eat(':')) return std::nullopt;
      std::optional<Json> v = value();
      if (!v) return std::nullopt;
      out[key->get<std::string>()] = std::move(*v);
      if (!eat(',')) {
        if (!eat('}')) return std::nullopt;
        break;
      }
    }
    return out;
  }

  void space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }

  template <typename F>
  std::optional<Json> nested(F&& f) {
    ++depth_;
    std::optional<Json> v = f();
    --depth_;
    return v;
  }

  static constexpr int kMaxDepth = 64;
  std::string_view s_;
  size_t i_ = 0;
  int depth_ = 0;
};

// Llama's: JSON objects joined by ';' (outside strings), or a JSON list of them.
bool llama_calls(std::string_view text, std::vector<ToolCall>& out) {
  std::vector<std::string_view> parts;
  bool in_string = false, escaped = false;
  int depth = 0;
  size_t from = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      escaped = !escaped && c == '\\';
      if (c == '"' && !escaped) in_string = false;
      if (c != '\\') escaped = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') --depth;
    if (c == ';' && depth == 0) {
      parts.push_back(text.substr(from, i - from));
      from = i + 1;
    }
  }
  parts.push_back(text.substr(from));
  for (std::string_view part : parts) {
    part = trim(part);
    if (part.empty()) continue;
    std::optional<Json> j = parse_json(part);
    if (!j) return false;
    const Json list = j->is_array() ? *j : Json::array({*j});
    for (const Json& one : list) {
      std::optional<ToolCall> call = call_of(one, {"parameters", "arguments"});
      if (!call) return false;
      out.push_back(std::move(*call));
    }
  }
  return !out.empty();
}

}  // namespace

ToolCallFormat tool_call_format(std::string_view chat_template) {
  if (chat_template.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::hermes;
  if (chat_template.find("<|tool_list_start|>") != std::string_view::npos ||
      chat_template.find(kPythonicOpen) != std::string_view::npos) {
    return ToolCallFormat::pythonic;
  }
  if (chat_template.find(kPythonTag) != std::string_view::npos ||
      chat_template.find("\"parameters\": ") != std::string_view::npos) {
    return ToolCallFormat::llama_json;
  }
  return ToolCallFormat::none;
}

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::hermes:
      return "hermes";
    case ToolCallFormat::llama_json:
      return "llama_json";
    case ToolCallFormat::pythonic:
      return "pythonic";
    case ToolCallFormat::none:
      break;
  }
  return "none";
}

ToolCallAnswer parse_tool_calls(ToolCallFormat format, std::string_view text) {
  switch (format) {
    case ToolCallFormat::hermes:
      return between_markers(text, kHermesOpen, kHermesClose,
                             [](std::string_view inside, std::vector<ToolCall>& calls) {
                               std::optional<Json> j = parse_json(trim(inside));
                               if (!j) return false;
                               std::optional<ToolCall> call = call_of(*j, {"arguments"});
                               if (!call) return false;
                               calls.push_back(std::move(*call));
                               return true;
                             });
    case ToolCallFormat::pythonic:
      return between_markers(text, kPythonicOpen, kPythonicClose,
                             [](std::string_view inside, std::vector<ToolCall>& calls) {
                               return Pythonic(inside).calls(calls);
                             });
    case ToolCallFormat::llama_json: {
      std::string_view body = trim(text);
      if (body.starts_with(kPythonTag)) body.remove_prefix(kPythonTag.size());
      ToolCallAnswer answer;
      if (llama_calls(body, answer.calls)) return answer;
      return {std::string(text), {}};
    }
    case ToolCallFormat::none:
      break;
  }
  return {std::string(text), {}};
}

size_t tool_call_start(ToolCallFormat format, std::string_view text) {
  switch (format) {
    case ToolCallFormat::hermes:
      return marker_start(text, kHermesOpen);
    case ToolCallFormat::pythonic:
      return marker_start(text, kPythonicOpen);
    case ToolCallFormat::llama_json: {
      // A call is the whole answer: held from the start while it may still be one.
      const std::string_view body = trim(text);
      if (body.empty() || body.starts_with('{') || body.starts_with('[') ||
          body.starts_with(kPythonTag) || kPythonTag.starts_with(body)) {
        return 0;
      }
      return std::string_view::npos;
    }
    case ToolCallFormat::none:
      break;
  }
  return std::string_view::npos;
}

}  // namespace prism::serve
