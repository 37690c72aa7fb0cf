#include "prism/serve/openai.h"

#include <fmt/format.h>

#include <charconv>
#include <random>

#include "prism/llm/answer_grammar.h"

namespace prism::serve {

ApiError::ApiError(int status, std::string message, std::string type, std::string param,
                   std::string code)
    : Error(message),
      status(status),
      type(std::move(type)),
      param(std::move(param)),
      code(std::move(code)) {}

std::string ApiError::body() const {
  nlohmann::ordered_json e = {
      {"message", what()},
      {"type", type},
      {"param", param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param)},
      {"code", code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code)}};
  return nlohmann::ordered_json{{"error", e}}.dump();
}

namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, "invalid_request_error", param);
}

// Whether o is an object whose `key` is the string `want` (Json::value would throw for a key
// of another type, a crash rather than the client's 400).
bool has_string(const Json& o, const char* key, std::string_view want) {
  if (!o.is_object()) return false;
  const auto it = o.find(key);
  return it != o.end() && it->is_string() && it->get_ref<const std::string&>() == want;
}

double number(const Json& j, const char* key, double low, double high) {
  if (!j.is_number()) bad(key, fmt::format("'{}' must be a number", key));
  const double v = j.get<double>();
  if (v < low || v > high)
    bad(key, fmt::format("'{}' must be between {} and {}, got {}", key, low, high, v));
  return v;
}

int64_t integer(const Json& j, const char* key, int64_t low) {
  if (!j.is_number_integer()) bad(key, fmt::format("'{}' must be an integer", key));
  const int64_t v = j.get<int64_t>();
  if (v < low) bad(key, fmt::format("'{}' must be at least {}, got {}", key, low, v));
  return v;
}

// A function's arguments as its `parameters` schema has them: none (no parameters) is `{}`;
// a schema prism cannot hold an answer to, any object (the call is still parsed as JSON).
std::shared_ptr<const llm::JsonSchema> arguments_schema(const Json& function) {
  static const auto any_object = llm::JsonSchema::compile({{"type", "object"}});
  static const auto no_arguments = llm::JsonSchema::compile(
      {{"type", "object"}, {"properties", Json::object()}, {"additionalProperties", false}});
  if (!function.contains("parameters") || function["parameters"].is_null()) return no_arguments;
  const Json& parameters = function["parameters"];
  if (parameters.contains("type") && parameters["type"] != "object") return any_object;
  try {
    return llm::JsonSchema::compile(function["parameters"]);
  } catch (const Error&) {
    return any_object;
  }
}

}  // namespace

CompletionRequest parse_request(std::string_view body, bool chat, const std::string& model_id) {
  constexpr size_t kMaxPrompts = 256;
  Json j;
  try {
    j = Json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    throw ApiError(400, fmt::format("the body is not valid JSON ({})", e.what()));
  }
  if (!j.is_object()) throw ApiError(400, "the body must be a JSON object");
  CompletionRequest r;
  r.chat = chat;
  auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  if (has("model")) {
    if (!j["model"].is_string()) bad("model", "'model' must be a string");
    const std::string model = j["model"].get<std::string>();
    if (model != model_id) {
      throw ApiError(
          404, fmt::format("the model '{}' does not exist; this server runs '{}'", model, model_id),
          "invalid_request_error", "model", "model_not_found");
    }
  }
  if (chat) {
    if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty()) {
      bad("messages", "'messages' must be a non-empty array");
    }
    for (const Json& m : j["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        bad("messages", "each message must be an object with a string 'role'");
      }
      if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null() &&
          !m["content"].is_array()) {
        bad("messages", "a message's 'content' must be a string or a list of parts");
      }
    }
    r.messages = j["messages"];
    // Content given as parts: their text, joined.
    for (Json& m : r.messages) {
      if (!m.contains("content") || !m["content"].is_array()) continue;
      std::string text;
      for (const Json& part : m["content"]) {
        if (!has_string(part, "type", "text") || !part.contains("text") ||
            !part["text"].is_string()) {
          bad("messages", "only text content parts are supported");
        }
        text += part["text"].get<std::string>();
      }
      m["content"] = text;
    }
    // Earlier calls of the conversation: their arguments as objects, as chat templates
    // (transformers') take them, where OpenAI's clients send them as JSON text.
    for (Json& m : r.messages) {
      if (!m.contains("tool_calls") || m["tool_calls"].is_null()) continue;
      if (!m["tool_calls"].is_array()) bad("messages", "a message's 'tool_calls' must be a list");
      for (Json& call : m["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
            !call["function"].contains("name") || !call["function"]["name"].is_string()) {
          bad("messages", "each tool call must have a 'function' with a string 'name'");
        }
        Json& args = call["function"]["arguments"];
        if (args.is_string()) {
          Json parsed = Json::parse(args.get<std::string>(), nullptr, false);
          if (!parsed.is_discarded() && parsed.is_object()) args = std::move(parsed);
        }
      }
    }
    if (has("tools")) {
      const Json& tools = j["tools"];
      if (!tools.is_array()) bad("tools", "'tools' must be a list");
      for (const Json& t : tools) {
        if (!has_string(t, "type", "function") || !t.contains("function") ||
            !t["function"].is_object() || !t["function"].contains("name") ||
            !t["function"]["name"].is_string()) {
          bad("tools", "each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
        const std::string name = t["function"]["name"].get<std::string>();
        if (name.empty() || name.size() > 64 ||
            name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "0123456789_-") != std::string::npos) {
          bad("tools", fmt::format("a function's name must be 1 to 64 letters, digits, '_' or "
                                   "'-', got '{}'",
                                   name));
        }
        if (t["function"].contains("parameters") && !t["function"]["parameters"].is_object() &&
            !t["function"]["parameters"].is_null()) {
          bad("tools", "a function's 'parameters' must be a JSON Schema object");
        }
      }
      if (!tools.empty()) r.tools = tools;
    }
    // "auto" (the default with tools), "none" (the tools are not shown to the model),
    // "required" (a call to one of them) or one function by name (a call to it).
    if (has("tool_choice")) {
      const Json& choice = j["tool_choice"];
      if (choice == "none") {
        r.tools = nullptr;
      } else if (choice == "required") {
        r.call_required = true;
      } else if (has_string(choice, "type", "function") && choice.contains("function") &&
                 choice["function"].is_object() && choice["function"].contains("name") &&
                 choice["function"]["name"].is_string()) {
        r.call_required = true;
        r.call_function = choice["function"]["name"].get<std::string>();
      } else if (choice != "auto") {
        bad("tool_choice",
            "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": "
            "\"function\", \"function\": {\"name\": ...}}");
      }
      if (r.call_required) {
        if (r.tools.is_null()) bad("tool_choice", "'tool_choice' asks for a call without 'tools'");
        bool known = r.call_function.empty();
        for (const Json& t : r.tools) known |= t["function"]["name"] == r.call_function;
        if (!known) {
          bad("tool_choice", fmt::format("'tool_choice' names '{}', which 'tools' does not have",
                                         r.call_function));
        }
        if (r.tools.size() > llm::AnswerGrammar::kMaxNames && r.call_function.empty()) {
          bad("tool_choice", fmt::format("'tool_choice' \"required\" takes at most {} tools",
                                         llm::AnswerGrammar::kMaxNames));
        }
        for (const Json& t : r.tools) {
          const Json& f = t["function"];
          const std::string name = f["name"].get<std::string>();
          if (!r.call_function.empty() && name != r.call_function) continue;
          r.call_names.push_back(name);
          r.call_arguments.push_back(arguments_schema(f));
        }
      }
    }
  } else {
    if (!j.contains("prompt")) bad("prompt", "'prompt' is required");
    // A string, token ids, or a list of either.
    const Json& p = j["prompt"];
    auto ids = [&](const Json& list) {
      CompletionRequest::Prompt one;
      for (const Json& id : list) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
          bad("prompt", "a prompt of token ids must list non-negative integers");
        }
        one.ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
      if (one.ids.empty()) bad("prompt", "a prompt of token ids must not be empty");
      r.prompts.push_back(std::move(one));
    };
    if (p.is_string()) {
      r.prompts.push_back({p.get<std::string>(), {}});
    } else if (p.is_array() && !p.empty() && !p[0].is_string() && !p[0].is_array()) {
      ids(p);
    } else if (p.is_array() && !p.empty() && p.size() <= kMaxPrompts) {
      for (const Json& one : p) {
        if (one.is_string() && p[0].is_string()) {
          r.prompts.push_back({one.get<std::string>(), {}});
        } else if (one.is_array() && p[0].is_array()) {
          ids(one);
        } else {
          bad("prompt", "a list of prompts must hold strings alone or lists of token ids alone");
        }
      }
    } else {
      bad("prompt", fmt::format("'prompt' must be a string, a non-empty list of token ids, or a "
                                "list of up to {} of either",
                                kMaxPrompts));
    }
    if (has("echo")) {
      if (!j["echo"].is_boolean()) bad("echo", "'echo' must be a boolean");
      r.echo = j["echo"].get<bool>();
    }
  }
  if (has("stream")) {
    if (!j["stream"].is_boolean()) bad("stream", "'stream' must be a boolean");
    r.stream = j["stream"].get<bool>();
    if (r.stream && r.prompts.size() > 1) bad("prompt", "a streamed completion takes one prompt");
  }
  if (has("stream_options")) {
    const Json& o = j["stream_options"];
    if (!o.is_object()) bad("stream_options", "'stream_options' must be an object");
    if (o.contains("include_usage")) {
      if (!o["include_usage"].is_boolean()) {
        bad("stream_options", "'stream_options.include_usage' must be a boolean");
      }
      r.include_usage = o["include_usage"].get<bool>();
    }
  }
  // 0 only for a prompt echoed: scoring it, as evaluation harnesses do.
  if (has("max_tokens")) r.max_tokens = integer(j["max_tokens"], "max_tokens", r.echo ? 0 : 1);
  if (has("max_completion_tokens")) {
    r.max_tokens = integer(j["max_completion_tokens"], "max_completion_tokens", 1);
  }
  if (has("n") && integer(j["n"], "n", 1) != 1) bad("n", "only n=1 is supported");
  if (has("stop")) {
    const Json& s = j["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4) {
      for (const Json& x : s) {
        if (!x.is_string()) bad("stop", "'stop' must be a string or a list of up to 4 strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or a list of up to 4 strings");
    }
  }
  r.sampling.temperature = has("temperature") ? number(j["temperature"], "temperature", 0, 2) : 1;
  if (has("top_p")) r.sampling.top_p = number(j["top_p"], "top_p", 0, 1);
  if (has("top_k")) r.sampling.top_k = integer(j["top_k"], "top_k", 0);
  if (has("min_p")) r.sampling.min_p = number(j["min_p"], "min_p", 0, 1);
  if (has("repetition_penalty")) {
    r.sampling.repetition_penalty =
        number(j["repetition_penalty"], "repetition_penalty", 0.01, 100);
  }
  if (has("frequency_penalty")) {
    r.sampling.frequency_penalty = number(j["frequency_penalty"], "frequency_penalty", -2, 2);
  }
  if (has("presence_penalty")) {
    r.sampling.presence_penalty = number(j["presence_penalty"], "presence_penalty", -2, 2);
  }
  if (has("logit_bias")) {
    const Json& b = j["logit_bias"];
    if (!b.is_object()) bad("logit_bias", "'logit_bias' must be an object of token ids to numbers");
    for (const auto& [key, value] : b.items()) {
      int32_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || id < 0) {
        bad("logit_bias", fmt::format("'logit_bias' keys must be token ids, got '{}'", key));
      }
      r.sampling.logit_bias.emplace_back(
          id, static_cast<float>(number(value, "logit_bias", -100, 100)));
    }
  }
  // Chat: logprobs (a boolean) and top_logprobs (0-20); completions: logprobs (0-5), the
  // number of likely tokens beside each chosen one.
  if (chat) {
    if (has("logprobs")) {
      if (!j["logprobs"].is_boolean()) bad("logprobs", "'logprobs' must be a boolean");
      r.logprobs = j["logprobs"].get<bool>();
    }
    if (has("top_logprobs")) {
      const int64_t top = integer(j["top_logprobs"], "top_logprobs", 0);
      if (top > 20) bad("top_logprobs", "'top_logprobs' must be at most 20");
      r.top_logprobs = static_cast<int>(top);
      if (!r.logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
  } else if (has("logprobs")) {
    r.logprobs = true;
    const int64_t top = integer(j["logprobs"], "logprobs", 0);
    if (top > 5) bad("logprobs", "'logprobs' must be at most 5");
    r.top_logprobs = static_cast<int>(top);
  }
  if (has("response_format")) {
    const Json& f = j["response_format"];
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string()) {
      bad("response_format", "'response_format' must be an object with a string 'type'");
    }
    const std::string type = f["type"].get<std::string>();
    // OpenAI's {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}, and
    // llama.cpp's {"type": "json_object", "schema": ...}.
    const Json* schema = nullptr;
    if (type == "json_schema") {
      if (!f.contains("json_schema") || !f["json_schema"].is_object() ||
          !f["json_schema"].contains("schema")) {
        bad("response_format",
            "'response_format' json_schema needs {\"json_schema\": {\"name\": ..., \"schema\": "
            "{...}}}");
      }
      const Json& js = f["json_schema"];
      if (js.contains("name") && !js["name"].is_string()) {
        bad("response_format", "'response_format' json_schema's 'name' must be a string");
      }
      if (js.contains("strict") && !js["strict"].is_boolean() && !js["strict"].is_null()) {
        bad("response_format", "'response_format' json_schema's 'strict' must be a boolean");
      }
      schema = &js["schema"];
    } else if (type == "json_object") {
      r.json = true;
      if (f.contains("schema") && !f["schema"].is_null()) schema = &f["schema"];
    } else if (type != "text") {
      bad("response_format",
          fmt::format("'response_format' may be text, json_object or json_schema, not {}", type));
    }
    if (schema != nullptr) {
      try {
        r.schema = llm::JsonSchema::compile(*schema);
      } catch (const Error& e) {
        bad("response_format", e.what());
      }
      r.json = false;
    }
  }
  if (has("seed")) {
    if (!j["seed"].is_number_integer()) bad("seed", "'seed' must be an integer");
    r.sampling.seed = static_cast<uint64_t>(j["seed"].get<int64_t>());
  } else {
    r.sampling.seed = std::random_device{}();
  }
  return r;
}

}  // namespace prism::serve
