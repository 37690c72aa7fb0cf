#include "prism/serve/server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include "prism/llm/answer_grammar.h"
#include "prism/llm/chat_template.h"
#include "prism/llm/sampler.h"
#include "prism/llm/speculative.h"
#include "prism/llm/tokenizer.h"
#include "prism/serve/chat_page.h"
#include "prism/serve/openai.h"
#include "prism/serve/tool_calls.h"

namespace prism::serve {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Constant-time comparison: how long it takes says nothing of where a wrong key differs.
bool same_key(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(i < b.size() ? b[i] : 0);
  }
  return diff == 0;
}

// A Prometheus histogram of seconds.
struct Histogram {
  static constexpr double kBounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  std::vector<uint64_t> counts = std::vector<uint64_t>(std::size(kBounds), 0);
  uint64_t count = 0;
  double sum = 0;
  void add(double seconds) {
    for (size_t i = 0; i < std::size(kBounds); ++i) counts[i] += seconds <= kBounds[i];
    ++count;
    sum += seconds;
  }
  std::string text(const std::string& name, const std::string& help) const {
    std::string s = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    for (size_t i = 0; i < std::size(kBounds); ++i) {
      s += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], counts[i]);
    }
    return s + fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count,
                           name, sum, name, count);
  }
};

struct Metrics {
  std::mutex mutex;
  std::map<int, uint64_t> requests;  // by status
  uint64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0, cancelled = 0;
  uint64_t guesses = 0, guesses_kept = 0;  // speculative decoding's
  Histogram first_token, per_token;
};

// A generated token's log-probability under the model (its logits' log-softmax, before the
// sampler's biases, penalties and temperature), the most likely tokens at its step beside it,
// and where its text starts in the answer (bytes; characters, as OpenAI counts them).
struct TokenLogprob {
  int32_t id = 0;
  bool known = true;  // false for an echoed prompt's first token, which nothing predicts
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
  size_t byte_offset = 0, text_offset = 0;
};

// `chosen`'s log-probability among `logits`, and the `top` most likely tokens' (most likely
// first; the lower id first among equals).
TokenLogprob score(std::span<const float> logits, int32_t chosen, int top) {
  const float most = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float l : logits) sum += std::exp(static_cast<double>(l) - most);
  const double log_sum = most + std::log(sum);
  auto logprob = [&](int32_t t) { return static_cast<float>(logits[t] - log_sum); };
  TokenLogprob r;
  r.id = chosen;
  r.logprob = logprob(chosen);
  std::vector<int32_t> best;  // the most likely so far, in order
  const auto k = static_cast<size_t>(std::min<int64_t>(top, std::ssize(logits)));
  for (int32_t t = 0; k > 0 && t < std::ssize(logits); ++t) {
    if (best.size() == k && logits[t] <= logits[best.back()]) continue;
    if (best.size() == k) best.pop_back();
    auto at = std::upper_bound(best.begin(), best.end(), t,
                               [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    best.insert(at, t);
  }
  for (const int32_t t : best) r.top.emplace_back(t, logprob(t));
  return r;
}

// A piece of an answer's text as it streams, with the log-probabilities of the tokens that
// start in it (where asked for).
struct Piece {
  std::string text;
  std::vector<TokenLogprob> logprobs;
};

// What a generation gave.
struct Outcome {
  std::string text;
  std::vector<TokenLogprob> logprobs;  // where asked for: one a token of the text
  std::vector<ToolCall> tool_calls;    // the calls read out of the answer, where tools were given
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // of the prompt's, taken from a slot's earlier conversation
  std::string finish = "stop";
  bool cancelled = false;
  std::string error;  // the engine failed
};

// A request's generation, between its HTTP handler (which waits for text and the end) and the
// scheduler (which makes them).
struct Job {
  CompletionRequest request;
  std::vector<int32_t> prompt;
  // What the answer is held to (response_format json_object, a tool call it must make), or
  // null.
  std::shared_ptr<const llm::AnswerGrammar> grammar;
  std::atomic<bool> cancelled{false};  // the client went away

  void push(Piece piece) {
    {
      std::lock_guard lock(mutex);
      pieces.push_back(std::move(piece));
    }
    changed.notify_all();
  }
  void end(Outcome o) {
    {
      std::lock_guard lock(mutex);
      outcome = std::move(o);
      finished = true;
    }
    changed.notify_all();
  }
  // The next piece of text, or nullopt once the generation has ended (outcome() is then set).
  std::optional<Piece> next() {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return !pieces.empty() || finished; });
    if (pieces.empty()) return std::nullopt;
    Piece piece = std::move(pieces.front());
    pieces.pop_front();
    return piece;
  }
  const Outcome& outcome_when_done() {
    while (next()) {
    }
    return outcome;
  }

 private:
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Piece> pieces;
  bool finished = false;
  Outcome outcome;
};

}  // namespace

class Server::Impl {
 public:
  Impl(llm::Engine& engine, const llm::Tokenizer& tokenizer, ServeOptions options)
      : engine_(engine), tokenizer_(tokenizer), options_(std::move(options)) {
    engine_.set_slots(std::max(1, options_.parallel));
    if (!tokenizer_.config().chat_template.empty()) {
      chat_.emplace(llm::ChatTemplate::from_tokenizer(tokenizer_));
      tool_format_ = tool_call_format(tokenizer_.config().chat_template);
    }
    const int threads = std::max(1, options_.threads);
    server_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    server_.set_payload_max_length(options_.max_body);
    // An idle keep-alive connection holds a thread until it times out, and a stop waits for
    // them: keep the wait short.
    server_.set_keep_alive_timeout(2);
    // cpp-httplib listens with a backlog of 5, compiled into Debian's library: of 16 clients
    // connecting at once, some had their connections dropped and retried a second later.
    // Linux takes a second listen() on the socket as a new backlog (bind() below).
    server_.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      socket_ = sock;
    });
    server_.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
      if (res.body.empty()) {
        const std::string message =
            res.status == 413   ? fmt::format("the body is larger than {} bytes", options_.max_body)
            : res.status == 404 ? "no such endpoint"
                                : fmt::format("HTTP {}", res.status);
        res.set_content(ApiError(res.status, message).body(), "application/json");
      }
    });
    server_.set_logger([this](const httplib::Request&, const httplib::Response& res) {
      std::lock_guard lock(metrics_.mutex);
      ++metrics_.requests[res.status];
    });
    server_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(chat_page()), "text/html; charset=utf-8");
    });
    server_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4");
    });
    server_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(req, res, [&] {
        Json model = {{"id", options_.model_id},
                      {"object", "model"},
                      {"created", created_},
                      {"owned_by", "prism"}};
        res.set_content(dump(Json{{"object", "list"}, {"data", Json::array({model})}}),
                        "application/json");
      });
    });
    for (bool chat : {true, false}) {
      server_.Post(chat ? "/v1/chat/completions" : "/v1/completions",
                   [this, chat](const httplib::Request& req, httplib::Response& res) {
                     guarded(req, res, [&] { complete(req, res, chat); });
                   });
    }
  }

  void bind() {
    if (options_.port == 0) {
      port_ = server_.bind_to_any_port(options_.host);
      PRISM_CHECK(port_ > 0, "serve: cannot listen on {}", options_.host);
    } else {
      PRISM_CHECK(server_.bind_to_port(options_.host, options_.port),
                  "serve: cannot listen on {}:{} (in use, or not an address of this machine?)",
                  options_.host, options_.port);
      port_ = options_.port;
    }
    ::listen(socket_, SOMAXCONN);
  }
  void run() {
    std::thread scheduler([this] { schedule(); });
    server_.listen_after_bind();  // returns once stopped and every handler has finished
    {
      std::lock_guard lock(queue_mutex_);
      stopping_ = true;
    }
    queue_changed_.notify_all();
    scheduler.join();
  }
  void stop() { server_.stop(); }
  int port() const { return port_; }
  uint64_t generated_tokens() {
    std::lock_guard lock(metrics_.mutex);
    return metrics_.generated_tokens;
  }

 private:
  // Runs `fn`, turning errors into OpenAI-style responses; checks the API key first.
  template <typename F>
  void guarded(const httplib::Request& req, httplib::Response& res, F&& fn) {
    try {
      if (!options_.api_key.empty()) {
        const std::string auth = req.get_header_value("Authorization");
        const std::string_view prefix = "Bearer ";
        if (auth.rfind(prefix, 0) != 0 || !same_key(auth.substr(prefix.size()), options_.api_key)) {
          throw ApiError(401, "a valid API key is needed (Authorization: Bearer KEY)",
                         "invalid_request_error", "", "invalid_api_key");
        }
      }
      fn();
    } catch (const ApiError& e) {
      res.status = e.status;
      res.set_content(e.body(), "application/json");
    } catch (const std::exception& e) {
      res.status = 500;
      res.set_content(ApiError(500, e.what(), "server_error").body(), "application/json");
    }
  }

  // The token ids of a chat's conversation, or of a completion's prompt `i`.
  std::vector<int32_t> prompt_ids(const CompletionRequest& r, size_t i = 0) const {
    if (!r.chat && !r.prompts[i].ids.empty()) {
      for (const int32_t id : r.prompts[i].ids) {
        if (id >= engine_.info().vocab_size) {
          throw ApiError(400,
                         fmt::format("the prompt has token {}; this model's ids are below {}", id,
                                     engine_.info().vocab_size),
                         "invalid_request_error", "prompt");
        }
      }
      return r.prompts[i].ids;
    }
    if (!r.chat) return tokenizer_.encode(r.prompts[i].text, {.add_special_tokens = true});
    if (!chat_) {
      throw ApiError(400, "this model's tokenizer has no chat template: use /v1/completions");
    }
    llm::ChatTemplateOptions t;
    t.add_generation_prompt = true;
    t.tools = r.tools;
    try {
      return tokenizer_.encode(chat_->apply(r.messages, t));
    } catch (const Error& e) {
      throw ApiError(400, fmt::format("the chat template refused the messages: {}", e.what()),
                     "invalid_request_error", "messages");
    }
  }

  void complete(const httplib::Request& req, httplib::Response& res, bool chat) {
    CompletionRequest r = parse_request(req.body, chat, options_.model_id);
    for (const auto& [token, bias] : r.sampling.logit_bias) {
      if (token >= engine_.info().vocab_size) {
        throw ApiError(400,
                       fmt::format("'logit_bias' names token {}; this model's ids are below {}",
                                   token, engine_.info().vocab_size),
                       "invalid_request_error", "logit_bias");
      }
    }
    if (!r.tools.is_null() && tool_format_ == ToolCallFormat::none) {
      throw ApiError(400,
                     "this model's chat template shows no tool calls (prism reads Hermes-style "
                     "<tool_call>, Llama 3.1's JSON and LFM 2's Python calls)",
                     "invalid_request_error", "tools");
    }
    const std::shared_ptr<const llm::AnswerGrammar> grammar = grammar_of(r);
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < (chat ? 1 : r.prompts.size()); ++i) {
      prompts.push_back(prompt_ids(r, i));
      const std::vector<int32_t>& prompt = prompts.back();
      const int64_t room = engine_.seqlen() - static_cast<int64_t>(prompt.size());
      if (prompt.empty() || room < 1) {
        throw ApiError(400,
                       fmt::format("the prompt is {} tokens; this server's context holds {} "
                                   "(--seqlen), with at least one to generate",
                                   prompt.size(), engine_.seqlen()),
                       "invalid_request_error", chat ? "messages" : "prompt",
                       "context_length_exceeded");
      }
    }
    const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", ++requests_);
    const int64_t created = unix_time();
    const std::string object = chat ? "chat.completion" : "text_completion";
    const bool want_logprobs = r.logprobs;
    if (!r.stream) {
      // Each prompt a generation of its own, all queued at once (they run side by side as
      // slots allow); a choice each, in the prompts' order.
      // (Each job's copy of the request without the prompts: its own ids are all it needs.)
      r.prompts.clear();
      std::vector<std::shared_ptr<Job>> jobs;
      for (std::vector<int32_t>& prompt : prompts) {
        jobs.push_back(submit(r, std::move(prompt), grammar));
      }
      Json choices = Json::array();
      Outcome total;
      std::string error;
      for (size_t i = 0; i < jobs.size(); ++i) {
        const Outcome& o = jobs[i]->outcome_when_done();
        if (!o.error.empty()) error = o.error;
        Json c = choice(chat, false, o.text, o.finish, logprobs(chat, o.logprobs, want_logprobs),
                        static_cast<int>(i));
        if (!o.tool_calls.empty()) {
          c["message"]["tool_calls"] = tool_calls_json(o.tool_calls, id, false);
          if (o.text.empty()) c["message"]["content"] = nullptr;
        }
        choices.push_back(std::move(c));
        total.prompt_tokens += o.prompt_tokens;
        total.completion_tokens += o.completion_tokens;
        total.cached_tokens += o.cached_tokens;
      }
      if (!error.empty()) throw ApiError(500, error, "server_error");
      Json body = {{"id", id},
                   {"object", object},
                   {"created", created},
                   {"model", options_.model_id},
                   {"choices", std::move(choices)},
                   {"usage", usage(total)}};
      res.set_content(dump(body), "application/json");
      return;
    }
    std::vector<int32_t> prompt = std::move(prompts.front());
    // Server-sent events: a chunk per piece of text, the finish reason, usage when asked,
    // then [DONE]. A client gone cancels its generation.
    const bool include_usage = r.include_usage;
    std::shared_ptr<Job> job = submit(std::move(r), std::move(prompt), grammar);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, job, id, created, chat,
                                                           include_usage, want_logprobs](
                                                              size_t, httplib::DataSink& sink) {
      const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
      auto send = [&](const Json& choices, const Json* use) {
        Json c = {{"id", id},
                  {"object", chunk_object},
                  {"created", created},
                  {"model", options_.model_id},
                  {"choices", choices}};
        if (use) c["usage"] = *use;
        const std::string event = "data: " + dump(c) + "\n\n";
        return sink.is_writable() && sink.write(event.data(), event.size());
      };
      auto piece = [&](const Piece& p, const Json& finish) {
        return send(Json::array({choice(chat, true, p.text, finish,
                                        logprobs(chat, p.logprobs, want_logprobs))}),
                    nullptr);
      };
      auto gone = [&] {
        job->cancelled = true;
        return false;
      };
      if (chat) {
        Json first = {{"index", 0},
                      {"delta", {{"role", "assistant"}, {"content", ""}}},
                      {"finish_reason", nullptr}};
        if (!send(Json::array({first}), nullptr)) return gone();
      }
      while (std::optional<Piece> p = job->next()) {
        if (!piece(*p, nullptr)) return gone();
      }
      const Outcome& o = job->outcome_when_done();
      if (!o.error.empty()) {
        const std::string event = "data: " + ApiError(500, o.error, "server_error").body() + "\n\n";
        sink.write(event.data(), event.size());
        sink.done();
        return true;
      }
      if (!o.tool_calls.empty()) {
        Json calls = {{"index", 0},
                      {"delta", {{"tool_calls", tool_calls_json(o.tool_calls, id, true)}}},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}};
        if (!send(Json::array({calls}), nullptr)) return gone();
      }
      if (!piece({}, o.finish)) return gone();
      if (include_usage) {
        const Json u = usage(o);
        if (!send(Json::array(), &u)) return gone();
      }
      const std::string done = "data: [DONE]\n\n";
      sink.write(done.data(), done.size());
      sink.done();
      return true;
    });
  }

  // What a request's answer is held to: a JSON object (response_format json_object), a value
  // of a JSON Schema (json_schema), or a call in the model's format to one of the tools or the
  // one named (tool_choice), the arguments held to its parameters; null for a free answer.
  std::shared_ptr<const llm::AnswerGrammar> grammar_of(const CompletionRequest& r) const {
    using Part = llm::AnswerGrammar::Part;
    if (r.call_required && (r.json || r.schema)) {
      throw ApiError(400, "a forced tool call and a response_format of JSON cannot both hold",
                     "invalid_request_error", "response_format");
    }
    if (r.json) return json_object_;
    if (r.schema) {
      return std::make_shared<const llm::AnswerGrammar>(
          std::vector<Part>{{Part::Kind::json_schema, "", {}, {r.schema}}});
    }
    if (!r.call_required) return nullptr;
    const std::vector<std::string>& names = r.call_names;
    std::vector<Part> parts;
    if (tool_format_ == ToolCallFormat::hermes) {
      parts = {{Part::Kind::literal, "<tool_call>\n{\"name\": \""},
               {Part::Kind::one_of, "", names},
               {Part::Kind::literal, "\", \"arguments\": "},
               {Part::Kind::json_schema, "", {}, r.call_arguments},
               {Part::Kind::literal, "}\n</tool_call>"}};
    } else if (tool_format_ == ToolCallFormat::llama_json) {
      parts = {{Part::Kind::literal, "{\"name\": \""},
               {Part::Kind::one_of, "", names},
               {Part::Kind::literal, "\", \"parameters\": "},
               {Part::Kind::json_schema, "", {}, r.call_arguments},
               {Part::Kind::literal, "}"}};
    } else {
      throw ApiError(
          400,
          fmt::format("this model calls tools in the {} format, where prism cannot force "
                      "a call: use tool_choice \"auto\"",
                      tool_call_format_name(tool_format_)),
          "invalid_request_error", "tool_choice");
    }
    return std::make_shared<const llm::AnswerGrammar>(std::move(parts));
  }

  // A message's tool_calls as OpenAI gives them (in a streamed chunk's delta, each with its
  // index); ids from the response's.
  static Json tool_calls_json(const std::vector<ToolCall>& calls, const std::string& id,
                              bool chunk) {
    Json out = Json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
      Json c = {{"id", fmt::format("call_{}_{}", id, i)},
                {"type", "function"},
                {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
      if (chunk) c["index"] = i;
      out.push_back(std::move(c));
    }
    return out;
  }

  // A choice of a response, or of a streamed chunk: the chat's message (its delta in a
  // chunk), or a completion's text; and its tokens' log-probabilities (logprobs()).
  static Json choice(bool chat, bool chunk, const std::string& text, const Json& finish,
                     Json logprobs, int index = 0) {
    if (!chat) {
      return {{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish}};
    }
    Json message = chunk ? Json{{"content", text}} : Json{{"role", "assistant"}, {"content", text}};
    return {{"index", index},
            {chunk ? "delta" : "message", message},
            {"logprobs", logprobs},
            {"finish_reason", finish}};
  }

  // A choice's "logprobs" (null where not asked for) in OpenAI's shapes: for a chat, each
  // token with its text, bytes and top_logprobs; for a completion, parallel lists of the
  // tokens, their log-probabilities, their top_logprobs (text to log-probability, the chosen
  // token among them) and where each starts in the text.
  Json logprobs(bool chat, const std::vector<TokenLogprob>& tokens, bool wanted) const {
    if (!wanted) return nullptr;
    auto text = [&](int32_t id) {
      return has_text(id) ? tokenizer_.decode(std::span(&id, 1)) : std::string();
    };
    if (chat) {
      auto entry = [&](int32_t id, float logprob) {
        const std::string t = text(id);
        Json bytes = Json::array();
        for (const char c : t) bytes.push_back(static_cast<unsigned char>(c));
        return Json{{"token", t}, {"logprob", logprob}, {"bytes", bytes}};
      };
      Json content = Json::array();
      for (const TokenLogprob& t : tokens) {
        Json e = entry(t.id, t.logprob);
        Json top = Json::array();
        for (const auto& [id, logprob] : t.top) top.push_back(entry(id, logprob));
        e["top_logprobs"] = std::move(top);
        content.push_back(std::move(e));
      }
      return {{"content", std::move(content)}, {"refusal", nullptr}};
    }
    Json texts = Json::array(), values = Json::array(), tops = Json::array(),
         offsets = Json::array();
    for (const TokenLogprob& t : tokens) {
      texts.push_back(text(t.id));
      offsets.push_back(t.text_offset);
      if (!t.known) {  // an echoed prompt's first token
        values.push_back(nullptr);
        tops.push_back(nullptr);
        continue;
      }
      values.push_back(t.logprob);
      Json top = Json::object();
      for (const auto& [id, logprob] : t.top) top[text(id)] = logprob;
      top[text(t.id)] = t.logprob;
      tops.push_back(std::move(top));
    }
    return {{"tokens", std::move(texts)},
            {"token_logprobs", std::move(values)},
            {"top_logprobs", std::move(tops)},
            {"text_offset", std::move(offsets)}};
  }

  static Json usage(const Outcome& o) {
    return {{"prompt_tokens", o.prompt_tokens},
            {"completion_tokens", o.completion_tokens},
            {"total_tokens", o.prompt_tokens + o.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
  }

  static int64_t unix_time() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  // The scheduler: the only thread that runs the engine. Requests wait in a queue for a free
  // slot; on each round every running generation either prefills a chunk of up to kChunk
  // tokens of its prompt on its own, or puts one token (its prompt's last kBatchedPrompt, then
  // the ones it picks) into the round's batched decoding step (Engine::decode), so a long
  // prompt does not hold the others' tokens back and the weights are read once per round for
  // all the rest. One whose client went away leaves at its next turn.
  static constexpr size_t kChunk = 64;
  static constexpr size_t kBatchedPrompt = 8;

  // A generation the scheduler runs.
  struct Running {
    std::shared_ptr<Job> job;
    int slot = 0;
    size_t fed = 0;     // of the prompt's tokens, in the slot's states
    size_t cached = 0;  // of those, the ones an earlier conversation left there
    // Until its first step: the tokens the slot's states hold from its last conversation.
    std::vector<int32_t> held;
    std::vector<float> logits;
    std::optional<llm::Sampler> sampler;
    std::vector<int32_t> history;
    std::optional<llm::StreamingDetokenizer> detok;
    std::string text;
    size_t sent = 0, hold = 0;
    size_t chars = 0;                    // in text (UTF-8 characters)
    std::vector<TokenLogprob> logprobs;  // where asked for: a token each, in order
    size_t logprobs_sent = 0;            // of those, the ones handed out with text
    // echo: the prompt's text, which the answer starts with, and where asked for its tokens'
    // log-probabilities (the prompt then runs whole, each token's logits kept: scoring).
    std::string echo;
    size_t echo_chars = 0;
    std::vector<TokenLogprob> prompt_logprobs;
    llm::AnswerGrammar::State grammar;  // the answer so far, against the job's grammar
    int64_t limit = 0, produced = 0;
    Clock::time_point start, decode_start;
    double first = 0;
    std::optional<int32_t> pending;  // the token to feed next
    std::optional<int32_t> decided;  // the token a speculative step decided, to hand out next
    std::optional<llm::GuessBudget> budget;
  };

  void schedule() {
    std::vector<Running> running;
    std::vector<int> free_slots;
    for (int k = engine_.slots() - 1; k >= 0; --k) free_slots.push_back(k);
    held_.assign(static_cast<size_t>(engine_.slots()), {});
    last_use_.assign(static_cast<size_t>(engine_.slots()), 0);
    // A generation leaves its slot: what its states hold stays there for the next prompt.
    auto leave = [&](Running& r, bool kept) {
      std::vector<int32_t>& held = held_[static_cast<size_t>(r.slot)];
      held.clear();
      if (kept && options_.prompt_cache) {
        const std::span<const int32_t> tokens = in_states(r);
        held.assign(tokens.begin(), tokens.end());
      }
      last_use_[static_cast<size_t>(r.slot)] = ++uses_;
      free_slots.push_back(r.slot);
    };
    for (;;) {
      {
        std::unique_lock lock(queue_mutex_);
        queue_changed_.wait(lock, [&] {
          return stopping_ || !running.empty() || (!queue_.empty() && !free_slots.empty());
        });
        if (stopping_ && queue_.empty() && running.empty()) return;
        while (!queue_.empty() && !free_slots.empty()) {
          std::shared_ptr<Job> job = std::move(queue_.front());
          queue_.pop_front();
          Running r;
          const size_t pick = pick_slot(free_slots, job->prompt);
          r.job = std::move(job);
          r.slot = free_slots[pick];
          r.held = std::move(held_[static_cast<size_t>(r.slot)]);
          held_[static_cast<size_t>(r.slot)].clear();
          free_slots.erase(free_slots.begin() + static_cast<std::ptrdiff_t>(pick));
          running.push_back(std::move(r));
        }
        waiting_ = static_cast<int>(queue_.size());
        generating_ = static_cast<int>(running.size());
      }
      for (size_t i = 0; i < running.size();) {
        bool done = true, failed = false;
        try {
          done = step(running[i], running);
        } catch (const std::exception& e) {
          finish(running[i], "stop", false, e.what());
          failed = true;
        }
        if (done) {
          leave(running[i], !failed);
          running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
      // Every generation's next token in one decoding step: the weights are read once for all.
      std::vector<size_t> batch;
      std::vector<int> slots;
      std::vector<int32_t> tokens;
      for (size_t i = 0; i < running.size(); ++i) {
        if (!running[i].pending) continue;
        batch.push_back(i);
        slots.push_back(running[i].slot);
        tokens.push_back(*running[i].pending);
        running[i].pending.reset();
      }
      if (!batch.empty()) {
        try {
          std::vector<std::vector<float>> logits = engine_.decode(slots, tokens);
          for (size_t k = 0; k < batch.size(); ++k) running[batch[k]].logits = std::move(logits[k]);
        } catch (const std::exception& e) {
          for (size_t k = batch.size(); k-- > 0;) {
            finish(running[batch[k]], "stop", false, e.what());
            leave(running[batch[k]], false);
            running.erase(running.begin() + static_cast<std::ptrdiff_t>(batch[k]));
          }
        }
      }
      generating_ = static_cast<int>(running.size());
    }
  }

  // The tokens of a started generation that its slot's states hold: its conversation (prompt,
  // then answer) as far as the engine has run it.
  std::span<const int32_t> in_states(const Running& r) const {
    const size_t n = std::min(r.history.size(), static_cast<size_t>(engine_.position(r.slot)));
    return std::span(r.history).first(n);
  }

  // How many tokens at the start of `prompt` `held` has too: all but the prompt's last token
  // at most, whose logits the first step needs.
  static size_t shared_start(std::span<const int32_t> held, const std::vector<int32_t>& prompt) {
    const size_t most = std::min(held.size(), prompt.empty() ? 0 : prompt.size() - 1);
    return static_cast<size_t>(std::mismatch(held.begin(),
                                             held.begin() + static_cast<std::ptrdiff_t>(most),
                                             prompt.begin())
                                   .first -
                               held.begin());
  }

  // The tokens at the start of `prompt` that `slot`, holding `held`, can keep
  // (Engine::can_rewind).
  size_t reusable(int slot, std::span<const int32_t> held,
                  const std::vector<int32_t>& prompt) const {
    const size_t n = shared_start(held, prompt);
    return n > 0 && engine_.can_rewind(slot, static_cast<int64_t>(n)) ? n : 0;
  }
  size_t reusable(int slot, const std::vector<int32_t>& prompt) const {
    return reusable(slot, held_[static_cast<size_t>(slot)], prompt);
  }

  // Another slot whose conversation starts as `prompt` does, further than `own` tokens, and
  // how far (Engine::can_share): a free slot's last conversation, or a running one's tokens so
  // far. Slot -1 where none does.
  std::pair<int, size_t> share_source(const Running& r, const std::vector<Running>& running,
                                      size_t own) const {
    std::pair<int, size_t> best{-1, own};
    auto consider = [&](int slot, std::span<const int32_t> tokens) {
      const size_t n = shared_start(tokens, r.job->prompt);
      if (n > best.second && engine_.can_share(slot, static_cast<int64_t>(n))) best = {slot, n};
    };
    for (size_t slot = 0; slot < held_.size(); ++slot) {
      if (!held_[slot].empty()) consider(static_cast<int>(slot), held_[slot]);
    }
    for (const Running& other : running) {
      if (&other == &r) continue;
      // (One not started yet: its slot still holds its last conversation.)
      consider(other.slot, other.sampler ? in_states(other) : std::span(other.held));
    }
    return best;
  }

  // Which of `free_slots` a request for `prompt` takes: the one that keeps most of it; among
  // equals (none, say), the one whose conversation was left longest ago, so that recent
  // conversations stay for their next turns.
  size_t pick_slot(const std::vector<int>& free_slots, const std::vector<int32_t>& prompt) const {
    size_t best = 0, best_kept = 0;
    for (size_t i = 0; i < free_slots.size(); ++i) {
      const size_t kept = reusable(free_slots[i], prompt);
      const bool older = last_use_[static_cast<size_t>(free_slots[i])] <
                         last_use_[static_cast<size_t>(free_slots[best])];
      if (kept > best_kept || (kept == best_kept && older)) {
        best = i;
        best_kept = kept;
      }
    }
    return best;
  }

  // One step of `r`, one of `running` generations; true when it has finished.
  bool step(Running& r, const std::vector<Running>& all) {
    const size_t running = all.size();
    Job& job = *r.job;
    const CompletionRequest& q = job.request;
    if (job.cancelled) {
      finish(r, "stop", false);
      return true;
    }
    const bool scoring = q.echo && q.logprobs;
    if (!r.sampler) {
      // Its first turn: the prompt's start from the slot's last conversation, or copied from
      // another slot that has more of it, as far as they share it (not where the prompt is
      // scored: all of it runs then).
      r.start = Clock::now();
      r.fed = r.cached = scoring ? 0 : reusable(r.slot, r.held, job.prompt);
      r.held.clear();
      const auto [source, shared] = options_.prompt_cache && !scoring
                                        ? share_source(r, all, r.fed)
                                        : std::pair<int, size_t>{-1, 0};
      if (source >= 0) {
        engine_.share(source, r.slot, static_cast<int64_t>(shared));
        r.fed = r.cached = shared;
      } else if (r.fed > 0) {
        engine_.rewind(r.slot, static_cast<int64_t>(r.fed));
      } else {
        engine_.reset(r.slot);
      }
      r.sampler.emplace(q.sampling);
      r.sampler->start_generation(job.prompt.size());
      // With tools, the answer's special tokens stay in its text: some formats mark calls with
      // them (LFM 2's <|tool_call_start|>).
      r.detok.emplace(tokenizer_, q.tools.is_null());
      r.history = job.prompt;
      r.limit = std::min<int64_t>(q.max_tokens >= 0 ? q.max_tokens : INT64_MAX,
                                  engine_.seqlen() - static_cast<int64_t>(job.prompt.size()));
      if (q.echo) echo_prompt(r);
      for (const std::string& stop : q.stop) r.hold = std::max(r.hold, stop.size());
      r.hold = r.hold > 0 ? r.hold - 1 : 0;
    }
    if (r.fed < job.prompt.size()) {
      const size_t left = job.prompt.size() - r.fed;
      if (scoring) {
        score_prompt(r, std::min(kChunk, left));
        return false;
      }
      if (left <= kBatchedPrompt && running > left) {
        // With more generations running than prompt tokens left, those tokens go one a round
        // with the others' tokens, in the batched step: the prompt shares the weight reads
        // instead of a forward pass of its own (left rounds against a pass per prompt).
        r.pending = job.prompt[r.fed++];
        return false;
      }
      // Else a chunk at a time, on its own.
      const size_t n = std::min(kChunk, left);
      r.logits = engine_.feed(r.slot, std::span(job.prompt).subspan(r.fed, n));
      r.fed += n;
      return false;
    }
    if (r.first == 0) {  // the prompt's logits are in: the first token comes now
      r.decode_start = Clock::now();
      r.first = std::chrono::duration<double>(r.decode_start - r.start).count();
      if (q.echo) job.push({r.echo, r.prompt_logprobs});
      if (r.limit == 0) {  // the prompt scored alone
        finish(r, "length", false);
        return true;
      }
    }
    // The token a speculative step decided, or one picked from the logits (for an answer held
    // to a grammar, from those of the tokens it allows).
    std::span<const float> logits = r.logits;
    std::vector<float> masked;
    if (job.grammar) {
      masked = r.logits;
      if (!grammar_mask(*job.grammar, r.grammar, masked)) {
        finish(r, "stop", false, "no token continues the answer's grammar");
        return true;
      }
      logits = masked;
    }
    const int32_t next = r.decided ? *r.decided : r.sampler->next(logits, r.history);
    r.decided.reset();
    std::optional<TokenLogprob> logprob;
    if (q.logprobs) logprob = score(r.logits, next, q.top_logprobs);
    if (emit(r, next, std::move(logprob))) return true;
    // Alone, with guesses to check: a speculative step (docs/speculative.md); else the token
    // is fed with the other generations' tokens, in one step. (A step decides its guesses
    // without their logits: not where log-probabilities are asked for.)
    if (running == 1 && options_.drafter && !q.logprobs && !job.grammar) {
      return speculate(r, next);
    }
    r.pending = next;
    return false;
  }

  // Hands `token` to the client (as far as no stop string can still claim it), with its
  // log-probability where asked for; true when the generation has finished (an
  // end-of-sequence id, a stop string, its length).
  bool emit(Running& r, int32_t token, std::optional<TokenLogprob> logprob = std::nullopt) {
    Job& job = *r.job;
    const CompletionRequest& q = job.request;
    const auto& eos = engine_.info().eos_token_ids;
    if (std::find(eos.begin(), eos.end(), token) != eos.end()) {
      finish(r, "stop", false);
      return true;
    }
    r.history.push_back(token);
    ++r.produced;
    if (job.grammar) job.grammar->feed(r.grammar, vocabulary().bytes(token));
    const size_t before = r.text.size();
    if (logprob) {
      logprob->byte_offset = before;
      logprob->text_offset = r.echo_chars + r.chars;
      r.logprobs.push_back(std::move(*logprob));
    }
    if (has_text(token)) r.text += r.detok->push(token);
    r.chars += characters(std::string_view(r.text).substr(before));
    size_t cut = std::string::npos;
    for (const std::string& stop : q.stop) {
      if (stop.empty()) continue;
      const size_t from = before > stop.size() ? before - stop.size() : 0;
      cut = std::min(cut, r.text.find(stop, from));
    }
    if (cut != std::string::npos) {
      r.text.resize(cut);
      // The tokens of the stop string (and after it) are not the answer's.
      while (!r.logprobs.empty() && r.logprobs.back().byte_offset >= cut) r.logprobs.pop_back();
      finish(r, "stop", true);
      return true;
    }
    // Text that can no longer become a stop string goes out, whole characters only, with the
    // log-probabilities of the tokens that start in it.
    size_t upto = r.text.size() > r.hold ? r.text.size() - r.hold : 0;
    // With tools, what may be a call waits for the end of the answer (finish() reads it).
    if (!q.tools.is_null()) upto = std::min(upto, tool_call_start(tool_format_, r.text));
    while (upto > r.sent && upto < r.text.size() && (r.text[upto] & 0xC0) == 0x80) --upto;
    if (upto > r.sent) {
      job.push(take(r, upto));
    }
    if (r.produced == r.limit) {
      finish(r, "length", false);
      return true;
    }
    return false;
  }

  // `next` (just handed out, not run yet) and the drafter's guesses after it in one step:
  // the guesses the model agrees with are handed out too, and the token after them is the next
  // step's. True when the generation has finished.
  bool speculate(Running& r, int32_t next) {
    if (!r.budget) r.budget.emplace(options_.draft_tokens);
    llm::SpeculationStats stats;
    const std::vector<int32_t> decided = llm::check_guesses(
        engine_, r.slot, *r.sampler, *options_.drafter, *r.budget, r.history, stats);
    if (decided.empty()) {
      r.pending = next;
      return false;
    }
    {
      std::lock_guard lock(metrics_.mutex);
      metrics_.guesses += static_cast<uint64_t>(stats.drafted);
      metrics_.guesses_kept += static_cast<uint64_t>(stats.accepted);
    }
    for (size_t i = 0; i + 1 < decided.size(); ++i) {
      if (emit(r, decided[i])) return true;
    }
    r.decided = decided.back();
    return false;
  }

  // Whether the tokenizer has text for a model's token id: a model's vocabulary may be larger
  // than its tokenizer's (Qwen's rows padded to a multiple of 128), and a model with untrained
  // or random rows may pick one of those. They make no text (as transformers decodes them).
  bool has_text(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= tokenizer_.vocab_size()) return false;
    try {
      tokenizer_.id_to_token(id);
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  // The vocabulary's tokens as bytes, indexed for grammar masks (llm::GrammarMask), made at
  // the first request with a grammar.
  const llm::GrammarMask& vocabulary() {
    if (!vocabulary_)
      vocabulary_.emplace(llm::GrammarMask::of(tokenizer_, engine_.info().vocab_size));
    return *vocabulary_;
  }

  // Masks the logits of the tokens `grammar` refuses after `state` (an end token only once it
  // is complete). False where none is left.
  bool grammar_mask(const llm::AnswerGrammar& grammar, const llm::AnswerGrammar::State& state,
                    std::vector<float>& logits) {
    return vocabulary().apply(grammar, state, engine_.info().eos_token_ids, logits, allowed_);
  }

  // The text of an echoed prompt, and where log-probabilities are asked for, an entry for each
  // of its tokens (their values come as the prompt runs, score_prompt).
  void echo_prompt(Running& r) const {
    const std::vector<int32_t>& prompt = r.job->prompt;
    llm::StreamingDetokenizer detok(tokenizer_, true);
    for (size_t i = 0; i < prompt.size(); ++i) {
      if (r.job->request.logprobs) {
        TokenLogprob t;
        t.id = prompt[i];
        t.known = i > 0;
        t.text_offset = r.echo_chars;
        r.prompt_logprobs.push_back(std::move(t));
      }
      const std::string piece = has_text(prompt[i]) ? detok.push(prompt[i]) : std::string();
      r.echo += piece;
      r.echo_chars += characters(piece);
    }
    const std::string rest = detok.finish();
    r.echo += rest;
    r.echo_chars += characters(rest);
  }

  // The next `n` tokens of a prompt being scored, in one pass that keeps the logits after each
  // (Engine::feed_every): each gives the next prompt token's log-probability, the last the
  // logits the answer starts from.
  void score_prompt(Running& r, size_t n) {
    const std::vector<int32_t>& prompt = r.job->prompt;
    const std::vector<float> rows = engine_.feed_every(r.slot, std::span(prompt).subspan(r.fed, n));
    const size_t vocab = rows.size() / n;
    for (size_t i = 0; i < n; ++i) {
      const std::span<const float> row(rows.data() + i * vocab, vocab);
      const size_t next = r.fed + i + 1;  // the token these logits predict
      if (next < prompt.size()) {
        TokenLogprob& t = r.prompt_logprobs[next];
        const TokenLogprob s = score(row, prompt[next], r.job->request.top_logprobs);
        t.logprob = s.logprob;
        t.top = s.top;
      } else {
        r.logits.assign(row.begin(), row.end());
      }
    }
    r.fed += n;
  }

  // The text of `r` from what was sent up to `upto`, and the log-probabilities of the tokens
  // that start in it (with `rest`, all that are left).
  static Piece take(Running& r, size_t upto, bool rest = false) {
    Piece p;
    p.text = r.text.substr(r.sent, upto - r.sent);
    r.sent = upto;
    size_t n = r.logprobs_sent;
    while (n < r.logprobs.size() && (rest || r.logprobs[n].byte_offset < upto)) {
      ++n;
    }
    p.logprobs.assign(r.logprobs.begin() + static_cast<std::ptrdiff_t>(r.logprobs_sent),
                      r.logprobs.begin() + static_cast<std::ptrdiff_t>(n));
    r.logprobs_sent = n;
    return p;
  }

  static size_t characters(std::string_view utf8) {
    return static_cast<size_t>(
        std::count_if(utf8.begin(), utf8.end(), [](char c) { return (c & 0xC0) != 0x80; }));
  }

  void finish(Running& r, const std::string& reason, bool stopped, const std::string& error = "") {
    Job& job = *r.job;
    if (r.detok && !stopped && !job.cancelled && error.empty()) r.text += r.detok->finish();
    // The calls in an answer to a request with tools; the text around them stays its content
    // (what was sent of it came before the first call).
    std::vector<ToolCall> calls;
    std::string why = reason;
    if (!job.request.tools.is_null() && !job.cancelled && error.empty()) {
      ToolCallAnswer answer = parse_tool_calls(tool_format_, r.text);
      if (!answer.calls.empty()) {
        r.text = std::move(answer.content);
        calls = std::move(answer.calls);
        why = "tool_calls";
      }
    }
    if ((r.sent < r.text.size() || r.logprobs_sent < r.logprobs.size()) && !job.cancelled) {
      job.push(take(r, r.text.size(), true));
    }
    Outcome o;
    o.text = r.echo + r.text;
    o.logprobs = std::move(r.prompt_logprobs);
    o.logprobs.insert(o.logprobs.end(), r.logprobs.begin(), r.logprobs.end());
    o.prompt_tokens = static_cast<int64_t>(job.prompt.size());
    o.cached_tokens = static_cast<int64_t>(r.cached);
    o.completion_tokens = r.produced;
    o.finish = why;
    o.tool_calls = std::move(calls);
    o.cancelled = job.cancelled;
    o.error = error;
    {
      std::lock_guard lock(metrics_.mutex);
      metrics_.prompt_tokens += r.fed - r.cached;
      metrics_.cached_tokens += r.cached;
      metrics_.generated_tokens += r.produced;
      metrics_.cancelled += o.cancelled;
      if (r.first > 0) metrics_.first_token.add(r.first);
      if (r.produced > 1) {
        metrics_.per_token.add(
            std::chrono::duration<double>(Clock::now() - r.decode_start).count() /
            static_cast<double>(r.produced - 1));
      }
    }
    job.end(std::move(o));
  }

  // Queues a generation for the scheduler.
  std::shared_ptr<Job> submit(CompletionRequest request, std::vector<int32_t> prompt,
                              std::shared_ptr<const llm::AnswerGrammar> grammar = nullptr) {
    auto job = std::make_shared<Job>();
    job->request = std::move(request);
    job->prompt = std::move(prompt);
    job->grammar = std::move(grammar);
    {
      std::lock_guard lock(queue_mutex_);
      queue_.push_back(job);
      waiting_ = static_cast<int>(queue_.size());
    }
    queue_changed_.notify_all();
    return job;
  }

  std::string metrics() {
    std::lock_guard lock(metrics_.mutex);
    std::string s =
        "# HELP prism_requests_total HTTP requests answered, by status.\n"
        "# TYPE prism_requests_total counter\n";
    for (auto [status, n] : metrics_.requests) {
      s += fmt::format("prism_requests_total{{status=\"{}\"}} {}\n", status, n);
    }
    auto counter = [&](const char* name, const char* help, uint64_t v) {
      s += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
    };
    auto gauge = [&](const char* name, const char* help, int64_t v) {
      s += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
    };
    counter("prism_prompt_tokens_total", "Prompt tokens prefilled.", metrics_.prompt_tokens);
    counter("prism_prompt_tokens_cached_total",
            "Prompt tokens taken from a slot's earlier conversation instead (--prompt-cache).",
            metrics_.cached_tokens);
    counter("prism_generated_tokens_total", "Tokens generated.", metrics_.generated_tokens);
    counter("prism_cancelled_total", "Generations stopped because the client went away.",
            metrics_.cancelled);
    counter("prism_speculation_guesses_total",
            "Guessed tokens checked by speculative decoding (--speculate).", metrics_.guesses);
    counter("prism_speculation_guesses_kept_total", "Guessed tokens the model agreed with.",
            metrics_.guesses_kept);
    gauge("prism_queue_length", "Requests waiting for the model.", waiting_.load());
    gauge("prism_batch_size", "Sequences in the running step.", generating_.load());
    gauge("prism_slots", "Sequences the server runs at once (--parallel).", options_.parallel);
    s += metrics_.first_token.text("prism_time_to_first_token_seconds",
                                   "From the model's turn to the first token.");
    s += metrics_.per_token.text("prism_time_per_token_seconds",
                                 "Decoding time per generated token after the first.");
    return s;
  }

  llm::Engine& engine_;
  const llm::Tokenizer& tokenizer_;
  ServeOptions options_;
  socket_t socket_ = -1;  // the listening socket
  std::optional<llm::ChatTemplate> chat_;
  ToolCallFormat tool_format_ = ToolCallFormat::none;  // how its template has the model call
  std::optional<llm::GrammarMask> vocabulary_;         // vocabulary()'s, once made
  std::vector<uint8_t> allowed_;                       // grammar_mask()'s
  const std::shared_ptr<const llm::AnswerGrammar> json_object_ =
      std::make_shared<const llm::AnswerGrammar>(llm::AnswerGrammar::json_object());
  httplib::Server server_;
  int port_ = 0;
  const int64_t created_ = unix_time();
  std::atomic<uint64_t> requests_{0};
  std::mutex queue_mutex_;
  std::condition_variable queue_changed_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::atomic<int> waiting_{0}, generating_{0};
  Metrics metrics_;
  // The scheduler's: the tokens each slot's states hold from its last conversation (empty
  // without --prompt-cache), and when each slot was last left.
  std::vector<std::vector<int32_t>> held_;
  std::vector<uint64_t> last_use_;
  uint64_t uses_ = 0;
};

Server::Server(llm::Engine& engine, const llm::Tokenizer& tokenizer, ServeOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(options))) {}
Server::~Server() = default;
void Server::bind() { impl_->bind(); }
void Server::run() { impl_->run(); }
void Server::stop() { impl_->stop(); }
int Server::port() const { return impl_->port(); }
uint64_t Server::generated_tokens() const { return impl_->generated_tokens(); }

}  // namespace prism::serve
