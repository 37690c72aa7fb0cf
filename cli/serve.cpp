// `prism serve`: the OpenAI-compatible server (prism/serve/server.h, docs/serving.md).
#include <csignal>
#include <cstdio>
#include <optional>
#include <thread>

#include "cli/command.h"
#include "prism/backends/registry.h"
#include "prism/core/error.h"
#include "prism/io/vfs.h"
#include "prism/llm/engine.h"
#include "prism/llm/gguf_model.h"
#include "prism/llm/speculative.h"
#include "prism/llm/tokenizer.h"
#include "prism/runtime/processes.h"
#include "prism/serve/server.h"
#include "prism/smi/activity.h"

namespace {

struct Options {
  std::string model, model_id, platform, dtype = "auto", mesh, quantize, keep_quantized = "auto";
  prism::serve::ServeOptions serve;
  int64_t seqlen = 4096, devices = 1, parallel = 1;
  std::string speculate = "none", draft_model;
  int64_t draft_tokens = 4;
};

// SIGTERM and SIGINT stop taking requests; the ones running finish.
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

int run(const Options& o) {
  PRISM_CHECK(o.serve.port >= 0 && o.serve.port < 65536, "serve: --port must be 0..65535, got {}",
              o.serve.port);
  PRISM_CHECK(o.parallel >= 1 && o.parallel <= 256, "serve: --parallel must be 1..256, got {}",
              o.parallel);
  PRISM_CHECK(o.devices >= 1, "serve: --devices must be at least 1, got {}", o.devices);
  PRISM_CHECK(o.devices == 1 || o.mesh.empty(), "serve: give --devices or --mesh, not both");
  const std::optional<prism::DType> dtype = prism::llm::compute_dtype(o.dtype, "serve");
  prism::llm::check_speculation(o.speculate, o.draft_model, o.draft_tokens, "serve");
  const std::optional<prism::quant::GgmlType> quantize =
      prism::llm::quantize_type(o.quantize, "serve");
  // A GGUF file carries its tokenizer; a checkpoint directory needs tokenizer.json.
  if (!prism::llm::is_gguf_uri(o.model) &&
      !prism::io::exists(prism::io::join(o.model, "tokenizer.json"))) {
    prism::fail("serve: {} has no tokenizer.json", o.model);
  }
  prism::llm::Tokenizer tokenizer = prism::llm::Tokenizer::load(o.model);
  prism::llm::EngineOptions engine_options;
  engine_options.seqlen = o.seqlen;
  engine_options.dtype = dtype;
  engine_options.quantize = quantize;
  engine_options.keep_quantized = prism::llm::keep_quantized(o.keep_quantized, "serve");
  if (o.devices > 1) engine_options.mesh = prism::Mesh({{prism::models::kModelAxis, o.devices}});
  if (!o.mesh.empty()) engine_options.mesh = prism::Mesh::parse(o.mesh);
  // A run of several processes (mpirun; docs/cluster.md): by default one device in each; rank 0
  // serves, the others follow its batches.
  prism::Processes* processes = prism::Processes::get();
  if (processes && o.devices == 1 && o.mesh.empty()) {
    engine_options.mesh = prism::Mesh({{prism::models::kModelAxis, processes->size()}});
  }
  const bool follower = processes && processes->rank() != 0;
  if (follower) engine_options.load.report = engine_options.load.progress = false;
  prism::Platform& engine_platform = prism::get_platform(o.platform);
  engine_options.draft_head = prism::llm::uses_draft_head(o.speculate);
  prism::llm::Engine engine(o.model, engine_platform, engine_options);
  const prism::llm::Speculation speculation = prism::llm::make_speculation(
      o.speculate, o.draft_model, engine_platform, engine_options, "serve", &engine);
  if (follower) {  // rank 0 decides when to stop (mpirun signals every process)
    std::signal(SIGTERM, SIG_IGN);
    std::signal(SIGINT, SIG_IGN);
    prism::llm::follow_leader();
    return 0;
  }
  prism::serve::ServeOptions options = o.serve;
  options.drafter = speculation.drafter.get();
  options.draft_tokens = o.draft_tokens;
  options.parallel = static_cast<int>(o.parallel);
  options.model_id = o.model_id.empty() ? o.model : o.model_id;
  prism::serve::Server server(engine, tokenizer, options);
  server.bind();
  std::fprintf(stderr, "prism serve: %s on http://%s:%d/v1\n", options.model_id.c_str(),
               options.host.c_str(), server.port());
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  // What the server does, for `prism smi` (prism/smi/activity.h): tokens generated, and the
  // rate over the last second.
  std::vector<int> device_indices;
  for (size_t d = 0; d < engine.devices().size(); ++d)
    device_indices.push_back(static_cast<int>(d));
  // The slots are allocated, and their memory does not change while the server runs (the
  // engine is the scheduler thread's from now on: not to be read from here).
  const uint64_t bytes = engine.device_bytes();
  prism::smi::Publisher publisher({.command = "serve",
                                   .model = options.model_id,
                                   .platform = std::string(engine_platform.name()),
                                   .devices = device_indices,
                                   .memory_bytes = bytes});
  std::thread watcher([&] {
    auto last = std::chrono::steady_clock::now();
    uint64_t last_tokens = 0;
    while (!g_stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::seconds(1)) continue;
      const uint64_t tokens = server.generated_tokens();
      const double seconds = std::chrono::duration<double>(now - last).count();
      publisher.update(tokens, (tokens - last_tokens) / seconds, bytes);
      last = now;
      last_tokens = tokens;
    }
    server.stop();
  });
  server.run();
  g_stop = true;
  watcher.join();
  std::fprintf(stderr, "prism serve: stopped\n");
  return 0;
}

const prism::cli::RegisterCommand kServe{
    "serve", "Serve a model over an OpenAI-compatible HTTP API",
    [](CLI::App& app) -> prism::cli::Action {
      auto o = std::make_shared<Options>();
      app.add_option("--model", o->model, "model URI (with its tokenizer)")->required();
      app.add_option("--model-id", o->model_id, "the model's name in the API (default: --model)");
      app.add_option("--host", o->serve.host, "address to listen on")->capture_default_str();
      app.add_option("--port", o->serve.port, "port (0: any free one)")->capture_default_str();
      app.add_option("--api-key", o->serve.api_key, "require Authorization: Bearer KEY");
      app.add_option("--max-body", o->serve.max_body, "largest request body, bytes")
          ->capture_default_str();
      app.add_option("--parallel", o->parallel,
                     "generations at once (each keeps a KV cache of --seqlen positions)")
          ->capture_default_str();
      app.add_option("--seqlen", o->seqlen, "context length")->capture_default_str();
      app.add_option("--prompt-cache", o->serve.prompt_cache,
                     "true: a request takes the slot whose last conversation shares the longest "
                     "start with its prompt and prefills only the rest (docs/serving.md)")
          ->capture_default_str();
      app.add_option("--platform", o->platform, "cpu, opencl, cuda, xla-cpu, ... auto");
      app.add_option("--dtype", o->dtype,
                     "auto (the checkpoint's: bf16 for a bf16 checkpoint), f32 or bf16")
          ->capture_default_str();
      app.add_option("--quantize", o->quantize,
                     "q8_0, q4_0 or q4_k: quantize a safetensors checkpoint's matrices as they "
                     "load (on the CPU, OpenCL and CUDA they stay quantized in memory; "
                     "docs/quantization.md)");
      app.add_option("--keep-quantized", o->keep_quantized,
                     "auto, yes (on every platform) or no: whether quantized matrices stay "
                     "quantized in memory")
          ->capture_default_str();
      app.add_option("--devices", o->devices, "tensor-parallel over N devices");
      app.add_option("--mesh", o->mesh, "the devices as named axes, as in model:2");
      app.add_option("--speculate", o->speculate,
                     "none; lookup, draft or mtp: speculative decoding while one generation "
                     "runs alone (docs/speculative.md)")
          ->capture_default_str();
      app.add_option("--draft-model", o->draft_model,
                     "--speculate=draft's model: a smaller one that shares the tokenizer");
      app.add_option("--draft-tokens", o->draft_tokens, "the most guesses checked in one step")
          ->capture_default_str();
      return [o] { return run(*o); };
    }};

}  // namespace
