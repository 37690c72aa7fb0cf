// `prism serve`: an OpenAI-compatible HTTP server over one model (docs/serving.md).
//
// Endpoints: POST /v1/chat/completions and /v1/completions (streamed as server-sent events
// when asked), GET /v1/models, /health and /metrics (Prometheus text). Up to `parallel`
// generations run at once, each in an engine slot of its own (continuous batching): new ones
// join between steps, their prompts prefilled a chunk at a time, and the running ones' tokens
// are decoded in one batched step (CausalLM::decode_batch); the others wait in a
// queue. A client that goes away stops its generation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "prism/llm/engine.h"
#include "prism/llm/speculative.h"
#include "prism/llm/tokenizer.h"

namespace prism::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;             // 0: any free port (port() says which)
  std::string api_key;         // non-empty: requests to /v1/ need "Authorization: Bearer KEY"
  size_t max_body = 1u << 20;  // bytes; larger bodies get 413
  std::string model_id;        // the name /v1/models gives and requests may name
  int parallel = 1;            // generations at once, each with its own KV cache and states
  int threads = 32;            // connections served at once
  // Speculative decoding (prism/llm/speculative.h) while one generation runs alone: its
  // drafter's guesses (not owned; used from the scheduler's thread alone), at most
  // draft_tokens a step. With several running, their tokens share one batched step instead.
  llm::Drafter* drafter = nullptr;
  int64_t draft_tokens = 4;
  // Prompt caching: a slot keeps its last conversation's states after it ends, and a new
  // request takes the free slot whose conversation shares the longest start with its prompt,
  // going back to where they part (Engine::rewind) and prefilling only the rest. A chat
  // client resends the whole conversation each turn, an agent the same long system prompt:
  // their turns then prefill the new tokens alone. Models with recurrent or convolution
  // states reuse a conversation only where the prompt continues all of it.
  bool prompt_cache = true;
};

class Server {
 public:
  // The engine and tokenizer stay the caller's and must outlive the server.
  Server(llm::Engine& engine, const llm::Tokenizer& tokenizer, ServeOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the address (throws when it cannot), then serves until stop(): requests in flight
  // are finished, new ones refused.
  void bind();
  void run();
  void stop();
  int port() const;
  // Tokens generated since the server started (prism_generated_tokens_total).
  uint64_t generated_tokens() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::serve
