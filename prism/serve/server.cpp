#include "prism/serve/server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>

#include "prism/llm/chat_template.h"
#include "prism/llm/sampler.h"
#include "prism/serve/openai.h"

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
  uint64_t prompt_tokens = 0, generated_tokens = 0, cancelled = 0;
  Histogram first_token, per_token;
};

// What a generation gave.
struct Outcome {
  std::string text;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::string finish = "stop";
  bool cancelled = false;
};

}  // namespace

class Server::Impl {
 public:
  Impl(llm::Engine& engine, const llm::Tokenizer& tokenizer, ServeOptions options)
      : engine_(engine), tokenizer_(tokenizer), options_(std::move(options)) {
    if (!tokenizer_.config().chat_template.empty()) {
      chat_.emplace(llm::ChatTemplate::from_tokenizer(tokenizer_));
    }
    const int threads = std::max(1, options_.threads);
    server_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    server_.set_payload_max_length(options_.max_body);
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
  }
  void run() { server_.listen_after_bind(); }
  void stop() { server_.stop(); }
  int port() const { return port_; }

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

  std::vector<int32_t> prompt_ids(const CompletionRequest& r) const {
    if (!r.chat) return tokenizer_.encode(r.prompt, {.add_special_tokens = true});
    if (!chat_) {
      throw ApiError(400, "this model's tokenizer has no chat template: use /v1/completions");
    }
    llm::ChatTemplateOptions t;
    t.add_generation_prompt = true;
    try {
      return tokenizer_.encode(chat_->apply(r.messages, t));
    } catch (const Error& e) {
      throw ApiError(400, fmt::format("the chat template refused the messages: {}", e.what()),
                     "invalid_request_error", "messages");
    }
  }

  void complete(const httplib::Request& req, httplib::Response& res, bool chat) {
    CompletionRequest r = parse_request(req.body, chat, options_.model_id);
    std::vector<int32_t> prompt = prompt_ids(r);
    const int64_t room = engine_.seqlen() - static_cast<int64_t>(prompt.size());
    if (prompt.empty() || room < 1) {
      throw ApiError(400,
                     fmt::format("the prompt is {} tokens; this server's context holds {} "
                                 "(--seqlen), with at least one to generate",
                                 prompt.size(), engine_.seqlen()),
                     "invalid_request_error", chat ? "messages" : "prompt",
                     "context_length_exceeded");
    }
    const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", ++requests_);
    const int64_t created = unix_time();
    const std::string object = chat ? "chat.completion" : "text_completion";
    if (!r.stream) {
      Outcome o = generate(r, prompt, [](const std::string&) { return true; });
      Json choice = chat ? Json{{"index", 0},
                                {"message", {{"role", "assistant"}, {"content", o.text}}},
                                {"finish_reason", o.finish}}
                         : Json{{"index", 0},
                                {"text", o.text},
                                {"logprobs", nullptr},
                                {"finish_reason", o.finish}};
      Json body = {{"id", id},
                   {"object", object},
                   {"created", created},
                   {"model", options_.model_id},
                   {"choices", Json::array({choice})},
                   {"usage", usage(o)}};
      res.set_content(dump(body), "application/json");
      return;
    }
    // Server-sent events: a chunk per piece of text, the finish reason, usage when asked,
    // then [DONE]. Generation runs in the provider; a client gone stops it.
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [this, r = std::move(r), prompt = std::move(prompt), id, created,
                              chat](size_t, httplib::DataSink& sink) {
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
          auto piece = [&](const std::string& text, const Json& finish) {
            Json choice =
                chat ? Json{{"index", 0}, {"delta", {{"content", text}}}, {"finish_reason", finish}}
                     : Json{{"index", 0},
                            {"text", text},
                            {"logprobs", nullptr},
                            {"finish_reason", finish}};
            return send(Json::array({choice}), nullptr);
          };
          if (chat) {
            Json first = {{"index", 0},
                          {"delta", {{"role", "assistant"}, {"content", ""}}},
                          {"finish_reason", nullptr}};
            if (!send(Json::array({first}), nullptr)) return false;
          }
          Outcome o =
              generate(r, prompt, [&](const std::string& text) { return piece(text, nullptr); });
          if (o.cancelled) return false;
          if (!piece("", o.finish)) return false;
          if (r.include_usage) {
            const Json u = usage(o);
            if (!send(Json::array(), &u)) return false;
          }
          const std::string done = "data: [DONE]\n\n";
          sink.write(done.data(), done.size());
          sink.done();
          return true;
        });
  }

  static Json usage(const Outcome& o) {
    return {{"prompt_tokens", o.prompt_tokens},
            {"completion_tokens", o.completion_tokens},
            {"total_tokens", o.prompt_tokens + o.completion_tokens}};
  }

  static int64_t unix_time() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  // One generation at a time, on the engine's single sequence. `emit` gets text as it becomes
  // final (held back while it could still turn into a stop string) and returns false when the
  // client is gone, which stops the generation.
  Outcome generate(const CompletionRequest& r, const std::vector<int32_t>& prompt,
                   const std::function<bool(const std::string&)>& emit) {
    ++waiting_;
    std::unique_lock lock(generate_mutex_);
    --waiting_;
    generating_ = 1;
    struct Done {
      std::atomic<int>& flag;
      ~Done() { flag = 0; }
    } done{generating_};
    Outcome o;
    o.prompt_tokens = static_cast<int64_t>(prompt.size());
    const auto& eos = engine_.info().eos_token_ids;
    const int64_t limit = std::min<int64_t>(r.max_tokens > 0 ? r.max_tokens : INT64_MAX,
                                            engine_.seqlen() - static_cast<int64_t>(prompt.size()));
    size_t hold = 0;
    for (const std::string& s : r.stop) hold = std::max(hold, s.size());
    hold = hold > 0 ? hold - 1 : 0;
    const auto start = Clock::now();
    engine_.reset();
    std::vector<float> logits = engine_.feed(prompt);
    const double first = std::chrono::duration<double>(Clock::now() - start).count();
    llm::Sampler sampler(r.sampling);
    std::vector<int32_t> history = prompt;
    llm::StreamingDetokenizer detok(tokenizer_, true);
    std::string text;
    size_t sent = 0;
    bool stopped = false;
    auto flush = [&](size_t upto) {
      while (upto > sent && upto < text.size() && (text[upto] & 0xC0) == 0x80) --upto;
      if (upto <= sent) return true;
      const bool ok = emit(text.substr(sent, upto - sent));
      sent = upto;
      return ok;
    };
    o.finish = "length";
    const auto decode_start = Clock::now();
    for (int64_t i = 0; i < limit; ++i) {
      const int32_t next = sampler.next(logits, history);
      if (std::find(eos.begin(), eos.end(), next) != eos.end()) {
        o.finish = "stop";
        break;
      }
      history.push_back(next);
      ++o.completion_tokens;
      const size_t before = text.size();
      text += detok.push(next);
      size_t cut = std::string::npos;
      for (const std::string& s : r.stop) {
        if (s.empty()) continue;
        const size_t from = before > s.size() ? before - s.size() : 0;
        cut = std::min(cut, text.find(s, from));
      }
      if (cut != std::string::npos) {
        text.resize(cut);
        o.finish = "stop";
        stopped = true;
        break;
      }
      if (!flush(text.size() > hold ? text.size() - hold : 0)) {
        o.cancelled = true;
        break;
      }
      if (i + 1 == limit) break;
      const int32_t feed[] = {next};
      logits = engine_.feed(feed);
    }
    if (!stopped && !o.cancelled) text += detok.finish();
    if (!o.cancelled && !flush(text.size())) o.cancelled = true;
    // flush() leaves a partial character at the very end only when the text ends with one.
    if (!o.cancelled && sent < text.size()) o.cancelled = !emit(text.substr(sent));
    o.text = text;
    std::lock_guard metrics_lock(metrics_.mutex);
    metrics_.prompt_tokens += o.prompt_tokens;
    metrics_.generated_tokens += o.completion_tokens;
    metrics_.cancelled += o.cancelled;
    metrics_.first_token.add(first);
    if (o.completion_tokens > 1) {
      metrics_.per_token.add(std::chrono::duration<double>(Clock::now() - decode_start).count() /
                             static_cast<double>(o.completion_tokens - 1));
    }
    return o;
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
    counter("prism_generated_tokens_total", "Tokens generated.", metrics_.generated_tokens);
    counter("prism_cancelled_total", "Generations stopped because the client went away.",
            metrics_.cancelled);
    gauge("prism_queue_length", "Requests waiting for the model.", waiting_.load());
    gauge("prism_batch_size", "Sequences in the running step.", generating_.load());
    s += metrics_.first_token.text("prism_time_to_first_token_seconds",
                                   "From the model's turn to the first token.");
    s += metrics_.per_token.text("prism_time_per_token_seconds",
                                 "Decoding time per generated token after the first.");
    return s;
  }

  llm::Engine& engine_;
  const llm::Tokenizer& tokenizer_;
  ServeOptions options_;
  std::optional<llm::ChatTemplate> chat_;
  httplib::Server server_;
  int port_ = 0;
  const int64_t created_ = unix_time();
  std::atomic<uint64_t> requests_{0};
  std::mutex generate_mutex_;
  std::atomic<int> waiting_{0}, generating_{0};
  Metrics metrics_;
};

Server::Server(llm::Engine& engine, const llm::Tokenizer& tokenizer, ServeOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(options))) {}
Server::~Server() = default;
void Server::bind() { impl_->bind(); }
void Server::run() { impl_->run(); }
void Server::stop() { impl_->stop(); }
int Server::port() const { return impl_->port(); }

}  // namespace prism::serve
