// The llama.cpp side of `prism-bench llm`: runs a GGUF model through llama.cpp's C API on the
// CPU and prints what prism measures on its side, one `key value` line each:
//   prefill_tok_s  <the prompt into an empty cache, tokens/s, median of PREFILL_RUNS>
//   decode_tok_s   <1 / the median seconds of the DECODE greedy steps after that prompt>
//   greedy_long    <the greedy ids after the prompt: its first, then the DECODE steps>
//   greedy_short   <SHORT_STEPS greedy ids after the SHORT prompt>
//   forced_short   <the most likely next id at each of those steps when fed FORCED instead:
//                   prism's greedy ids, so one flipped near-tie does not change all that follow>
//   forced_top5    <the five most likely next ids and their logits at each of those steps,
//                   id:logit joined by / within a step, steps by commas>
// usage: llamacpp-peer MODEL.gguf THREADS PROMPT_IDS DECODE SHORT_IDS SHORT_STEPS PREFILL_RUNS
//        FORCED_IDS            (id lists comma separated)
//        llamacpp-peer MODEL.gguf THREADS PROMPT_IDS first
//          loads the model, feeds the prompt and prints `first_token ID` and `first_token_s
//          <seconds since main started>`: a fresh process's time to its first answer.
//
// Not part of prism's build: scripts/build_llamacpp.sh compiles it against the llama.cpp it
// builds into third_party/llama.cpp/bin/. Settings are llama.cpp's defaults (weights mapped from
// the file, f16 KV cache, flash attention as llama.cpp picks it) but for the context (1024),
// the batch (the whole prompt at once) and the threads (prism's, for prefill and decode alike).
// On a CPU with AMX-INT8 the extra buffer types (AMX, and the weights' repacking) are off:
// llama.cpp 0.3.36's AMX kernels for Q8_0 and Q4_0 die there (SIGILL at tilezero in an OpenMP
// worker; SIGSEGV with the AMX permission asked of Linux beforehand).
#include <llama.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Whether /proc/cpuinfo lists AMX-INT8.
bool cpu_has_amx_int8() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return false;
  char line[8192];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f)) {
    found = std::string(line).rfind("flags", 0) == 0 &&
            std::string(line).find(" amx_int8") != std::string::npos;
  }
  std::fclose(f);
  return found;
}

std::vector<llama_token> parse_ids(const char* text) {
  std::vector<llama_token> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

std::string join(const std::vector<llama_token>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "llamacpp-peer: %s\n", what);
  std::exit(1);
}

class Peer {
 public:
  Peer(const char* model_path, int threads, int n_batch) {
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    if (cpu_has_amx_int8()) mp.use_extra_bufts = false;
    model_ = llama_model_load_from_file(model_path, mp);
    if (!model_) fail("could not load the model");
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024;
    cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(std::max(n_batch, 1));
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.no_perf = true;
    ctx_ = llama_init_from_model(model_, cp);
    if (!ctx_) fail("could not make a context");
    n_vocab_ = llama_vocab_n_tokens(llama_model_get_vocab(model_));
  }
  ~Peer() {
    llama_free(ctx_);
    llama_model_free(model_);
  }

  void clear() {
    llama_memory_clear(llama_get_memory(ctx_), true);
    pos_ = 0;
  }

  // Appends `tokens` to the cache; returns the argmax of the logits at each position from
  // `first_out` on (the last position only by default). Reading the logits waits for the
  // computation, so a call's time is the step's.
  std::vector<llama_token> feed(const std::vector<llama_token>& tokens, int first_out = -1) {
    const int n = static_cast<int>(tokens.size());
    if (first_out < 0) first_out = n - 1;
    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; ++i) {
      batch.token[i] = tokens[i];
      batch.pos[i] = pos_ + i;
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = i >= first_out;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx_, batch) != 0) fail("llama_decode failed");
    llama_batch_free(batch);
    pos_ += n;
    std::vector<llama_token> out;
    top5_.clear();
    for (int i = first_out; i < n; ++i) {
      const float* logits = llama_get_logits_ith(ctx_, i);
      if (!logits) fail("no logits");
      out.push_back(static_cast<llama_token>(std::max_element(logits, logits + n_vocab_) - logits));
      std::vector<int> ids(static_cast<size_t>(n_vocab_));
      for (int v = 0; v < n_vocab_; ++v) ids[v] = v;
      const int k = std::min(5, n_vocab_);
      std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                        [&](int a, int b) { return logits[a] > logits[b]; });
      std::string step;
      for (int j = 0; j < k; ++j) {
        char item[64];
        std::snprintf(item, sizeof item, "%s%d:%.6g", j ? "/" : "", ids[j], logits[ids[j]]);
        step += item;
      }
      top5_.push_back(step);
    }
    return out;
  }
  // The five most likely ids with their logits at each position the last feed returned.
  const std::vector<std::string>& top5() const { return top5_; }

 private:
  llama_model* model_ = nullptr;
  llama_context* ctx_ = nullptr;
  int n_vocab_ = 0;
  int pos_ = 0;
  std::vector<std::string> top5_;
};

// Greedy ids after `prompt`, `steps` of them; the seconds of each step after the first.
std::vector<llama_token> greedy(Peer& peer, const std::vector<llama_token>& prompt, int steps,
                                std::vector<double>* seconds = nullptr) {
  peer.clear();
  std::vector<llama_token> out = peer.feed(prompt);
  while (static_cast<int>(out.size()) < steps) {
    double start = now();
    llama_token next = peer.feed({out.back()})[0];
    if (seconds) seconds->push_back(now() - start);
    out.push_back(next);
  }
  return out;
}

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
  const double started = now();
  if (argc == 5 && std::string(argv[4]) == "first") {
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    const std::vector<llama_token> prompt = parse_ids(argv[3]);
    {
      Peer peer(argv[1], std::atoi(argv[2]), static_cast<int>(prompt.size()));
      const llama_token first = peer.feed(prompt)[0];
      const double seconds = now() - started;
      std::printf("first_token %d\nfirst_token_s %.3f\n", first, seconds);
    }
    llama_backend_free();
    return 0;
  }
  if (argc != 9) {
    std::fprintf(stderr,
                 "usage: llamacpp-peer MODEL.gguf THREADS PROMPT_IDS DECODE SHORT_IDS SHORT_STEPS "
                 "PREFILL_RUNS FORCED_IDS\n");
    return 2;
  }
  const int threads = std::atoi(argv[2]);
  const std::vector<llama_token> prompt = parse_ids(argv[3]);
  const int decode = std::atoi(argv[4]);
  const std::vector<llama_token> short_prompt = parse_ids(argv[5]);
  const int short_steps = std::atoi(argv[6]);
  const int prefill_runs = std::atoi(argv[7]);
  const std::vector<llama_token> forced = parse_ids(argv[8]);
  if (threads < 1 || decode < 1 || short_steps < 1 || prefill_runs < 1 ||
      static_cast<int>(forced.size()) < short_steps - 1) {
    fail("bad arguments");
  }

  llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  const int batch = static_cast<int>(
      std::max(prompt.size(), short_prompt.size() + static_cast<size_t>(short_steps)));
  {
    Peer peer(argv[1], threads, batch);
    std::vector<double> prefill;
    for (int r = 0; r < prefill_runs; ++r) {
      peer.clear();
      double start = now();
      peer.feed(prompt);
      prefill.push_back(prompt.size() / (now() - start));
    }
    std::vector<double> steps;
    std::vector<llama_token> long_ids = greedy(peer, prompt, decode + 1, &steps);
    std::vector<llama_token> short_ids = greedy(peer, short_prompt, short_steps);
    // Fed the short prompt and then the forced ids, all in one batch: the argmax after the
    // prompt and after each forced id.
    peer.clear();
    std::vector<llama_token> input = short_prompt;
    input.insert(input.end(), forced.begin(), forced.begin() + (short_steps - 1));
    std::vector<llama_token> forced_next =
        peer.feed(input, static_cast<int>(short_prompt.size()) - 1);

    std::printf("prefill_tok_s %.2f\n", median(prefill));
    std::printf("decode_tok_s %.3f\n", 1 / median(steps));
    std::printf("greedy_long %s\n", join(long_ids).c_str());
    std::printf("greedy_short %s\n", join(short_ids).c_str());
    std::printf("forced_short %s\n", join(forced_next).c_str());
    std::string top5;
    for (const std::string& step : peer.top5()) top5 += (top5.empty() ? "" : ",") + step;
    std::printf("forced_top5 %s\n", top5.c_str());
  }
  llama_backend_free();
  return 0;
}
