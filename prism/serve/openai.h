// The OpenAI API as `prism serve` speaks it: requests parsed and checked field by field, and
// errors in OpenAI's JSON shape ({"error": {"message", "type", "param", "code"}}).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "prism/core/error.h"
#include "prism/llm/json_schema.h"
#include "prism/llm/sampler.h"

namespace prism::serve {

// An error the client gets: an HTTP status and OpenAI's error object.
struct ApiError : Error {
  ApiError(int status, std::string message, std::string type = "invalid_request_error",
           std::string param = "", std::string code = "");
  int status;
  std::string type, param, code;
  std::string body() const;
};

// A completion request: chat messages (/v1/chat/completions) or a prompt (/v1/completions).
struct CompletionRequest {
  bool chat = true;
  nlohmann::ordered_json messages;  // chat
  // Chat: the functions the model may call (a list, rendered by its chat template), or null
  // (none given, or tool_choice "none").
  nlohmann::ordered_json tools;
  // tool_choice "required" (a call to one of the tools) or {"type": "function", "function":
  // {"name": ...}} (a call to that one): the answer is held to a call.
  bool call_required = false;
  std::string call_function;  // empty: any of the tools
  // A forced call's choices: the functions' names, and each one's parameters schema compiled
  // (where a schema asks for what prism cannot hold to, `{"type": "object"}`'s).
  std::vector<std::string> call_names;
  std::vector<std::shared_ptr<const llm::JsonSchema>> call_arguments;
  // Completions: the prompts, each text or token ids as they are (not empty); several get a
  // choice each (not streamed).
  struct Prompt {
    std::string text;
    std::vector<int32_t> ids;
  };
  std::vector<Prompt> prompts;
  bool echo = false;  // completions: the answer starts with the prompt
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // -1: until an end token or the context is full; 0 (with echo) scores the prompt alone.
  int64_t max_tokens = -1;
  std::vector<std::string> stop;
  llm::SamplerOptions sampling;
  // Log-probabilities of the generated tokens (chat: `logprobs: true`; completions:
  // `logprobs: N`), each with the `top_logprobs` most likely tokens at its step.
  bool logprobs = false;
  int top_logprobs = 0;
  // response_format json_object: the answer is held to a JSON object, token by token;
  // json_schema (or json_object with a schema): to a value of the schema.
  bool json = false;
  std::shared_ptr<const llm::JsonSchema> schema;
};

// Parses and checks a request body for `model_id` (a request naming another model is a 404);
// throws ApiError naming the field that is wrong.
CompletionRequest parse_request(std::string_view body, bool chat, const std::string& model_id);

}  // namespace prism::serve
