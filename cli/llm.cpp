// `prism llm`: runs a Llama model from any source. With --prompt-ids it feeds ids as they
// are and generates; --print-ids prints the generated ids on one line.
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "prism/core/error.h"
#include "prism/llm/engine.h"
#include "prism/llm/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  bool print_ids = false;
  int64_t max_tokens = 256;
  prism::llm::SamplerOptions sampling;
  int64_t seqlen = 4096;
  std::string platform;
  std::string dtype = "f32";
};

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

int run(const Options& o) {
  PRISM_CHECK(o.prompt.empty() || o.prompt_ids.empty(),
              "llm: give --prompt or --prompt-ids, not both");
  PRISM_CHECK(!o.prompt_ids.empty(),
              "llm: text prompts and chat need the model's tokenizer, which this build does not "
              "wire in yet; use --prompt-ids=ID,ID,...");
  PRISM_CHECK(o.max_tokens >= 0, "llm: --max-tokens must be >= 0, got {}", o.max_tokens);
  std::vector<int32_t> prompt = parse_ids(o.prompt_ids);
  prism::DType dtype = prism::dtype_from_name(o.dtype);
  PRISM_CHECK(dtype == prism::DType::f32 || dtype == prism::DType::bf16,
              "llm: --dtype must be f32 or bf16, got {}", o.dtype);

  prism::Platform& platform = prism::get_platform(o.platform);
  prism::llm::EngineOptions options;
  options.seqlen = o.seqlen;
  options.dtype = dtype;
  prism::llm::Engine engine(o.model, platform, options);
  prism::llm::Sampler sampler(o.sampling);
  const auto& eos = engine.config().eos_token_ids;

  auto t0 = Clock::now();
  std::vector<float> logits = engine.feed(prompt);
  double prefill_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::vector<int32_t> history = prompt, generated;
  t0 = Clock::now();
  for (int64_t i = 0; i < o.max_tokens; ++i) {
    int32_t next = sampler.next(logits, history);
    generated.push_back(next);
    history.push_back(next);
    if (!o.print_ids) {
      std::printf("%d ", next);
      std::fflush(stdout);
    }
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) break;
    if (i + 1 == o.max_tokens) break;
    if (engine.position() >= engine.seqlen()) {
      std::fprintf(stderr, "llm: stopped at the cache's %ld positions (--seqlen)\n",
                   engine.seqlen());
      break;
    }
    int32_t feed[] = {next};
    logits = engine.feed(feed);
  }
  double decode_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (o.print_ids) {
    for (size_t i = 0; i < generated.size(); ++i) std::printf("%s%d", i ? " " : "", generated[i]);
  }
  std::printf("\n");
  size_t decoded = generated.empty() ? 0 : generated.size() - 1;  // the first came from prefill
  std::fprintf(
      stderr,
      "prefill: %zu tok in %.1f ms (%.1f tok/s) · decode: %zu tok in %.1f ms (%.1f tok/s)\n",
      prompt.size(), prefill_ms, prompt.size() / (prefill_ms / 1e3), decoded, decode_ms,
      decoded ? decoded / (decode_ms / 1e3) : 0.0);
  return 0;
}

const prism::cli::RegisterCommand kLlm{
    "llm", "Generate with a Llama model from a directory, https://, hf:// or s3://",
    [](CLI::App& app) -> prism::cli::Action {
      auto o = std::make_shared<Options>();
      app.add_option("--model", o->model, "model URI")->required();
      app.add_option("--prompt", o->prompt, "prompt text");
      app.add_option("--prompt-ids", o->prompt_ids, "prompt as comma-separated token ids");
      app.add_flag("--print-ids", o->print_ids, "print the generated ids on one line");
      app.add_option("--max-tokens", o->max_tokens, "tokens to generate")->capture_default_str();
      app.add_option("--temperature", o->sampling.temperature, "0 = greedy")->capture_default_str();
      app.add_option("--top-k", o->sampling.top_k, "0 = all");
      app.add_option("--top-p", o->sampling.top_p);
      app.add_option("--min-p", o->sampling.min_p);
      app.add_option("--repetition-penalty", o->sampling.repetition_penalty);
      app.add_option("--seed", o->sampling.seed);
      app.add_option("--seqlen", o->seqlen, "KV cache length")->capture_default_str();
      app.add_option("--platform", o->platform, "cpu, opencl, cuda, auto");
      app.add_option("--dtype", o->dtype, "f32 or bf16")->capture_default_str();
      return [o] { return run(*o); };
    }};

}  // namespace
