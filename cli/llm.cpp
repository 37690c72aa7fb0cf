// `prism llm`: runs a language model from any source, a checkpoint directory or a GGUF file. With
// --prompt-ids it feeds ids as they are and generates; --print-ids prints the generated ids on one
// line.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "prism/backends/registry.h"
#include "prism/core/error.h"
#include "prism/io/vfs.h"
#include "prism/llm/answer_grammar.h"
#include "prism/llm/chat_template.h"
#include "prism/llm/engine.h"
#include "prism/llm/gguf_model.h"
#include "prism/llm/sampler.h"
#include "prism/llm/speculative.h"
#include "prism/llm/tokenizer.h"
#include "prism/runtime/processes.h"
#include "prism/smi/activity.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  std::string prompt;
  std::string system;
  std::vector<std::string> stop;
  std::string prompt_ids;
  bool print_ids = false;
  bool map_weights = false;
  bool fast_start = true;
  int64_t max_tokens = 256;
  prism::llm::SamplerOptions sampling;
  int64_t seqlen = 4096;
  std::string platform;
  std::string dtype = "auto";
  std::string quantize;
  std::string keep_quantized = "auto";
  int64_t devices = 1;
  std::string mesh;
  std::string speculate = "none";
  std::string draft_model;
  int64_t draft_tokens = 4;
  bool json = false;        // each answer held to a JSON object
  std::string json_schema;  // ... to a value of this JSON Schema (a file, or the JSON itself)
};

// What --json or --json-schema holds each answer to (null: nothing), made before the load so
// that a bad schema fails at once.
std::shared_ptr<const prism::llm::AnswerGrammar> answer_grammar(const Options& o) {
  if (!o.json && o.json_schema.empty()) return nullptr;
  PRISM_CHECK(!o.json || o.json_schema.empty(), "llm: give --json or --json-schema, not both");
  PRISM_CHECK(o.speculate == "none",
              "llm: --speculate with --json or --json-schema is not supported");
  std::string schema = o.json_schema;
  if (!schema.empty() && schema.find_first_not_of(" \t\n") != std::string::npos &&
      schema[schema.find_first_not_of(" \t\n")] != '{') {
    std::ifstream in(schema, std::ios::binary);
    PRISM_CHECK(in, "llm: cannot read the --json-schema file {}", o.json_schema);
    schema.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    PRISM_CHECK(!schema.empty(), "llm: the --json-schema file {} is empty", o.json_schema);
  }
  try {
    return prism::llm::json_answer_grammar(schema);
  } catch (const prism::Error& e) {
    prism::fail("{} (--json-schema)", e.what());
  }
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      long long v = std::stoll(item, &used);
      PRISM_CHECK(used == item.size() && v >= 0 && v <= INT32_MAX, "bad");
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      prism::fail("llm: --prompt-ids must be comma-separated token ids, got '{}'", item);
    }
  }
  PRISM_CHECK(!ids.empty(), "llm: --prompt-ids is empty");
  return ids;
}

// Ctrl-C during an answer stops the answer, not the program.
std::atomic<bool> g_interrupted{false};
void on_interrupt(int) { g_interrupted = true; }

struct Stats {
  size_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_ms = 0, decode_ms = 0;
  double copy_wait_ms = 0;  // --fast-start: waiting for the weights' copy, in neither
  size_t generated = 0;
  prism::llm::SpeculationStats speculation;
  bool speculating = false;
  // What this process does, for `prism smi` (prism/smi/activity.h): tokens generated and the
  // decoding rate of the current answer, at most every half second (and at its end).
  prism::smi::Publisher* publisher = nullptr;
  std::chrono::steady_clock::time_point published;
  void publish(const prism::llm::Engine& engine, double rate, bool force) {
    const auto now = std::chrono::steady_clock::now();
    if (!publisher || (!force && now - published < std::chrono::milliseconds(500))) return;
    publisher->update(generated, rate, engine.device_bytes());
    published = now;
  }
  // After the answer, on a line of its own also where stdout and stderr share a pipe (stdout
  // is flushed first).
  void print() const {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "prefill: %zu tok in %.1f ms (%.1f tok/s) · decode: %zu tok in %.1f ms "
                 "(%.1f tok/s)",
                 prefill_tokens, prefill_ms,
                 prefill_ms > 0 ? prefill_tokens / (prefill_ms / 1e3) : 0.0, decode_tokens,
                 decode_ms, decode_ms > 0 ? decode_tokens / (decode_ms / 1e3) : 0.0);
    if (speculating) {
      std::fprintf(stderr, " · speculation: %ld of %ld guesses kept (%.0f%%) in %ld checks",
                   speculation.accepted, speculation.drafted,
                   speculation.drafted ? 100.0 * speculation.accepted / speculation.drafted : 0.0,
                   speculation.checks);
    }
    if (copy_wait_ms > 0) std::fprintf(stderr, " · waited %.1f ms for the copy", copy_wait_ms);
    std::fprintf(stderr, "\n");
  }
};

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Generates after `prompt` (which joins `history`, the conversation; the engine may not have
// run its last token yet); streams text through `detok` (or collects ids) and returns the
// generated ids, which join `history` too. Stops at an eos id (not kept), a stop string, the
// token limit, a full cache or Ctrl-C.
std::vector<int32_t> generate(prism::llm::Engine& engine, prism::llm::Sampler& sampler,
                              prism::llm::Drafter* drafter, std::span<const int32_t> prompt,
                              const Options& o, prism::llm::StreamingDetokenizer* detok,
                              std::vector<int32_t>& history, Stats& stats,
                              std::optional<prism::llm::HeldAnswer> held) {
  const auto& eos = engine.info().eos_token_ids;
  history.insert(history.end(), prompt.begin(), prompt.end());
  prism::llm::GeneratorOptions options{.drafter = drafter, .draft_tokens = o.draft_tokens};
  if (held) options.constrain = [&](std::span<float> logits) { held->mask(logits); };
  prism::llm::Generator generator(engine, sampler, history, options);
  // Time spent waiting for the weights' copy (--fast-start) counts apart.
  const double w0 = engine.copy_wait_seconds();
  auto t0 = Clock::now();
  std::vector<int32_t> generated;
  std::string text;
  g_interrupted = false;
  double w1 = w0;
  for (int64_t i = 0; i < o.max_tokens && !g_interrupted; ++i) {
    if (generator.full()) {
      std::fprintf(stderr, "\nllm: stopped at the cache's %ld positions (--seqlen)\n",
                   engine.seqlen());
      break;
    }
    const int32_t next = generator.next();
    if (held) held->take(next);
    if (i == 0) {  // the first token: the prompt's step
      w1 = engine.copy_wait_seconds();
      stats.prefill_ms += ms_since(t0) - (w1 - w0) * 1e3;
      stats.prefill_tokens += prompt.size();
      t0 = Clock::now();
    }
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) {
      history.pop_back();
      break;
    }
    generated.push_back(next);
    ++stats.generated;
    stats.publish(engine, i > 0 ? i / (ms_since(t0) / 1e3) : 0, false);
    if (detok) {
      std::string piece = detok->push(next);
      text += piece;
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
      // A new match ends inside the new piece: search only the tail that could hold it.
      bool stop = false;
      for (const std::string& s : o.stop) {
        size_t from = text.size() - piece.size();
        from = from > s.size() ? from - s.size() : 0;
        stop = stop || (!s.empty() && text.find(s, from) != std::string::npos);
      }
      if (stop) break;
    }
  }
  generator.stop();
  if (held && !held->complete() && !g_interrupted) {
    std::fprintf(stderr, "\nllm: the answer stopped before its JSON was whole\n");
  }
  // Decoding: the steps after the first token's.
  const double w2 = engine.copy_wait_seconds();
  const double decode_ms = generated.size() > 1 ? ms_since(t0) - (w2 - w1) * 1e3 : 0;
  const double steps = generated.size() > 1 ? static_cast<double>(generated.size() - 1) : 0;
  stats.decode_ms += decode_ms;
  stats.decode_tokens += static_cast<size_t>(steps);
  stats.copy_wait_ms += (w2 - w0) * 1e3;
  stats.speculation.checks += generator.stats().checks;
  stats.speculation.drafted += generator.stats().drafted;
  stats.speculation.accepted += generator.stats().accepted;
  stats.publish(engine, decode_ms > 0 ? steps / (decode_ms / 1e3) : 0, true);
  if (detok) std::fputs(detok->finish().c_str(), stdout);
  return generated;
}

int run(const Options& o) {
  PRISM_CHECK(o.prompt.empty() || o.prompt_ids.empty(),
              "llm: give --prompt or --prompt-ids, not both");
  PRISM_CHECK(o.max_tokens >= 0, "llm: --max-tokens must be >= 0, got {}", o.max_tokens);
  const std::optional<prism::DType> dtype = prism::llm::compute_dtype(o.dtype, "llm");
  prism::llm::check_speculation(o.speculate, o.draft_model, o.draft_tokens, "llm");
  prism::llm::Sampler sampler(o.sampling);  // checks the sampling options before the load
  const std::shared_ptr<const prism::llm::AnswerGrammar> grammar = answer_grammar(o);
  std::vector<int32_t> prompt_ids;
  if (!o.prompt_ids.empty()) prompt_ids = parse_ids(o.prompt_ids);
  std::optional<prism::llm::Tokenizer> tokenizer;
  // Built on a thread of its own while the engine compiles and loads: a fresh process's first
  // answer waits for the longer of the two rather than for both in turn (the Llama 3 tokenizer
  // takes 0.1-0.35 s to build, as long as the rest of a fast start).
  std::future<prism::llm::Tokenizer> tokenizer_job;
  if (o.prompt_ids.empty() || !o.print_ids || grammar) {
    if (!prism::llm::is_gguf_uri(o.model) &&  // a GGUF file carries its tokenizer
        !prism::io::exists(prism::io::join(o.model, "tokenizer.json"))) {
      prism::fail("llm: {} has no tokenizer.json: use --prompt-ids=... with --print-ids", o.model);
    }
    tokenizer_job = std::async(std::launch::async,
                               [model = o.model] { return prism::llm::Tokenizer::load(model); });
  }

  PRISM_CHECK(o.devices >= 1, "llm: --devices must be at least 1, got {}", o.devices);
  PRISM_CHECK(o.devices == 1 || o.mesh.empty(), "llm: give --devices or --mesh, not both");
  // A run of several processes (mpirun; docs/cluster.md): by default one device in each; rank 0
  // leads, the others follow its steps and print nothing.
  prism::Processes* processes = prism::Processes::get();
  const bool follower = processes && processes->rank() != 0;
  prism::Platform& platform = prism::get_platform(o.platform);
  prism::llm::EngineOptions options;
  if (o.devices > 1) options.mesh = prism::Mesh({{prism::models::kModelAxis, o.devices}});
  if (!o.mesh.empty()) options.mesh = prism::Mesh::parse(o.mesh);
  if (processes && o.devices == 1 && o.mesh.empty()) {
    options.mesh = prism::Mesh({{prism::models::kModelAxis, processes->size()}});
  }
  if (follower) options.load.report = options.load.progress = false;
  options.seqlen = o.seqlen;
  options.dtype = dtype;
  options.load.zero_copy = o.map_weights;
  options.fast_start = o.fast_start;
  options.quantize = prism::llm::quantize_type(o.quantize, "llm");
  options.keep_quantized = prism::llm::keep_quantized(o.keep_quantized, "llm");
  options.draft_head = prism::llm::uses_draft_head(o.speculate);
  std::optional<prism::llm::Engine> made;
  try {
    made.emplace(o.model, platform, options);
  } catch (...) {
    // The tokenizer's error first, as when it was built before the engine.
    if (tokenizer_job.valid()) tokenizer_job.get();
    throw;
  }
  prism::llm::Engine& engine = *made;
  if (tokenizer_job.valid()) tokenizer = tokenizer_job.get();
  const prism::llm::Speculation speculation =
      prism::llm::make_speculation(o.speculate, o.draft_model, platform, options, "llm", &engine);
  if (follower) {  // rank 0 reads the user's interrupts (mpirun signals every process)
    std::signal(SIGINT, SIG_IGN);
    prism::llm::follow_leader();
    return 0;
  }
  prism::llm::Drafter* drafter = speculation.drafter.get();
  Stats stats;
  stats.speculating = drafter != nullptr;
  std::vector<int> device_indices;
  for (size_t d = 0; d < engine.devices().size(); ++d)
    device_indices.push_back(static_cast<int>(d));
  prism::smi::Publisher publisher({.command = "llm",
                                   .model = o.model,
                                   .platform = std::string(platform.name()),
                                   .devices = device_indices,
                                   .memory_bytes = engine.device_bytes()});
  stats.publisher = &publisher;
  std::vector<int32_t> history;
  // Each answer held to the grammar, over the vocabulary's tokens as bytes.
  std::shared_ptr<const prism::llm::GrammarMask> vocabulary;
  if (grammar) {
    vocabulary = std::make_shared<const prism::llm::GrammarMask>(
        prism::llm::GrammarMask::of(*tokenizer, engine.info().vocab_size));
  }
  auto held = [&]() -> std::optional<prism::llm::HeldAnswer> {
    if (!grammar) return std::nullopt;
    return prism::llm::HeldAnswer(grammar, vocabulary, engine.info().eos_token_ids);
  };

  if (!o.prompt_ids.empty()) {  // ids as they are: no template, no BOS added
    std::optional<prism::llm::StreamingDetokenizer> detok;
    if (!o.print_ids) detok.emplace(*tokenizer, true);
    std::vector<int32_t> out = generate(engine, sampler, drafter, prompt_ids, o,
                                        detok ? &*detok : nullptr, history, stats, held());
    if (o.print_ids) {
      for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? " " : "", out[i]);
    }
    std::printf("\n");
    stats.print();
    return 0;
  }

  // Text: through the model's own chat template when it has one.
  std::optional<prism::llm::ChatTemplate> chat;
  if (!tokenizer->config().chat_template.empty()) {
    chat = prism::llm::ChatTemplate::from_tokenizer(*tokenizer);
  }
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
  // The ids of the conversation so far, rendered; only what follows them is fed.
  auto turn = [&](const std::string& user) {
    messages.push_back({{"role", "user"}, {"content", user}});
    std::vector<int32_t> ids;
    if (chat) {
      prism::llm::ChatTemplateOptions t;
      t.add_generation_prompt = true;
      ids = tokenizer->encode(chat->apply(messages, t));
    } else {
      ids = tokenizer->encode(user, {.add_special_tokens = history.empty()});
      ids.insert(ids.begin(), history.begin(), history.end());
    }
    bool continues =
        ids.size() >= history.size() && std::equal(history.begin(), history.end(), ids.begin());
    if (!continues) {  // the template rewrote earlier turns: start over
      engine.reset();
      history.clear();
    }
    std::vector<int32_t> fresh(ids.begin() + history.size(), ids.end());
    prism::llm::StreamingDetokenizer detok(*tokenizer, true);
    std::vector<int32_t> reply =
        generate(engine, sampler, drafter, fresh, o, &detok, history, stats, held());
    std::printf("\n");
    messages.push_back({{"role", "assistant"},
                        {"content", tokenizer->decode(reply, {.skip_special_tokens = true})}});
  };

  if (!o.prompt.empty()) {
    turn(o.prompt);
    stats.print();
    return 0;
  }
  std::signal(SIGINT, on_interrupt);
  std::fprintf(stderr, "chat with %s: /reset starts over, /exit (or end of input) leaves\n",
               o.model.c_str());
  std::string line;
  bool terminal = isatty(0);
  while (true) {
    if (terminal) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit") break;
    if (line == "/reset") {
      engine.reset();
      history.clear();
      messages = nlohmann::ordered_json::array();
      if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
      continue;
    }
    if (line.empty()) continue;
    turn(line);
  }
  stats.print();
  return 0;
}

const prism::cli::RegisterCommand kLlm{
    "llm", "Generate with a Llama, Qwen 3.5 or LFM 2 model (a checkpoint or a .gguf file)",
    [](CLI::App& app) -> prism::cli::Action {
      auto o = std::make_shared<Options>();
      app.add_option("--model", o->model, "model URI")->required();
      app.add_option("--prompt", o->prompt, "prompt text (without it: an interactive chat)");
      app.add_option("--system", o->system, "system prompt");
      app.add_option("--stop", o->stop, "stop when the answer contains this text (repeatable)");
      app.add_option("--prompt-ids", o->prompt_ids, "prompt as comma-separated token ids");
      app.add_flag("--print-ids", o->print_ids, "print the generated ids on one line");
      app.add_flag("--map-weights", o->map_weights,
                   "use a local file's weights in place, mapped, instead of copying them");
      app.add_option(
             "--fast-start", o->fast_start,
             "true: a local checkpoint's first answer reads the weights from the file while "
             "they are copied into memory, later tokens from the copy; false: copy first")
          ->capture_default_str();
      app.add_option("--max-tokens", o->max_tokens, "tokens to generate")->capture_default_str();
      app.add_option("--temperature", o->sampling.temperature, "0 = greedy")->capture_default_str();
      app.add_option("--top-k", o->sampling.top_k, "0 = all");
      app.add_option("--top-p", o->sampling.top_p);
      app.add_option("--min-p", o->sampling.min_p);
      app.add_option("--repetition-penalty", o->sampling.repetition_penalty,
                     "> 1 discourages every token already in the conversation (Hugging Face's)");
      app.add_option("--frequency-penalty", o->sampling.frequency_penalty,
                     "-2..2: taken from a token's logit once for each time the answer has it "
                     "(OpenAI's)");
      app.add_option("--presence-penalty", o->sampling.presence_penalty,
                     "-2..2: taken from the logit of a token the answer has (OpenAI's)");
      app.add_option("--seed", o->sampling.seed);
      app.add_option("--seqlen", o->seqlen, "KV cache length")->capture_default_str();
      app.add_option("--platform", o->platform, "cpu, opencl, cuda, auto");
      app.add_option("--quantize", o->quantize,
                     "q8_0, q4_0 or q4_k: quantize a safetensors checkpoint's matrices as they "
                     "load, as a GGUF file of that type holds them (on the CPU, OpenCL and CUDA "
                     "they stay quantized in memory; docs/quantization.md)");
      app.add_option("--keep-quantized", o->keep_quantized,
                     "auto (where the platform multiplies the blocks itself), yes (on every "
                     "platform: PJRT through the op's decomposition) or no: whether quantized "
                     "matrices stay quantized in memory")
          ->capture_default_str();
      app.add_option("--dtype", o->dtype,
                     "auto (the checkpoint's: bf16 for a bf16 checkpoint), f32 or bf16")
          ->capture_default_str();
      app.add_option("--devices", o->devices,
                     "run tensor-parallel over N devices of the platform (--mesh=model:N)");
      app.add_option("--mesh", o->mesh, "the devices as named axes, as in model:2");
      app.add_option("--speculate", o->speculate,
                     "none; lookup, draft or mtp: speculative decoding, the next tokens "
                     "guessed from the conversation's earlier text (lookup), by a smaller model "
                     "(--draft-model) or by the model's own multi-token prediction head (mtp: "
                     "Qwen 3.5), and checked in one step (docs/speculative.md)")
          ->capture_default_str();
      app.add_option("--draft-model", o->draft_model,
                     "--speculate=draft's model: a smaller one that shares the tokenizer");
      app.add_option("--draft-tokens", o->draft_tokens, "the most guesses checked in one step")
          ->capture_default_str();
      app.add_flag("--json", o->json, "hold each answer to a JSON object, token by token");
      app.add_option("--json-schema", o->json_schema,
                     "hold each answer to a value of this JSON Schema, token by token: a file, "
                     "or the schema's JSON itself (docs/llm.md)");
      return [o] { return run(*o); };
    }};

}  // namespace
