#include "prism/llm/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>

#include "prism/core/error.h"
#include "prism/io/gguf.h"
#include "prism/io/vfs.h"
#include "prism/llm/gguf_model.h"
#include "prism/quant/quantize.h"

namespace prism::llm {
namespace {

nlohmann::json read_json(const std::string& uri) {
  std::string text = io::read_text(uri);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", uri, e.what());
  }
}

// Window sizes compiled for prefill; a window is padded up to the next one that fits. Padding
// costs as much as real tokens where a window's rows are bound by arithmetic (a prompt of 24
// tokens ran as 64 rows: 670 ms, the 1B shape's Q4_0 file on two Zen 2 cores), so platforms
// that compile in milliseconds (the CPU: 7 ms for 32 layers) get every power of two; the
// others, whose compilers take seconds, a few sizes.
constexpr int64_t kWindows[] = {1, 16, 64, 256, 512, 1024};
constexpr int64_t kFineWindows[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
// Window sizes for steps that return every token's logits (speculative decoding's checks of a
// few guessed tokens): every size up to 16, as padding costs as much as real tokens and each
// size compiles in about 0.1 s (the 1B shape on a Zen 4 core pair), then a few larger ones.
constexpr int64_t kCheckWindows[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                     11, 12, 13, 14, 15, 16, 24, 32, 48, 64};

// The first of `windows` (ascending) that holds `remaining` tokens and fits in `room`, at most
// the largest; `remaining` itself where none does.
int64_t padded_window(std::span<const int64_t> windows, int64_t remaining, int64_t room) {
  int64_t window = remaining;
  for (int64_t w : windows) {
    if (w >= remaining && w <= room) {
      window = w;
      break;
    }
  }
  return std::min(window, windows.back());
}

// The engines whose meshes span processes, by the order this process made them in: rank 0's
// calls name them so (follow_leader).
std::mutex& engines_mutex() {
  static std::mutex m;
  return m;
}
std::map<int32_t, Engine*>& engines() {
  static auto& all = *new std::map<int32_t, Engine*>;
  return all;
}
int32_t& next_engine() {
  static int32_t n = 0;
  return n;
}

}  // namespace

std::optional<DType> compute_dtype(std::string_view name, std::string_view command) {
  if (name == "auto") return std::nullopt;
  PRISM_CHECK(name == "f32" || name == "bf16", "{}: --dtype must be auto, f32 or bf16, got {}",
              command, name);
  return name == "f32" ? DType::f32 : DType::bf16;
}

std::optional<quant::GgmlType> quantize_type(std::string_view name, std::string_view command) {
  if (name.empty()) return std::nullopt;
  if (name == "q8_0") return quant::GgmlType::Q8_0;
  if (name == "q4_0") return quant::GgmlType::Q4_0;
  if (name == "q4_k") return quant::GgmlType::Q4_K;
  fail("{}: --quantize={} is not one of q8_0, q4_0, q4_k", command, name);
}

std::optional<bool> keep_quantized(std::string_view name, std::string_view command) {
  if (name == "auto") return std::nullopt;
  if (name == "yes") return true;
  if (name == "no") return false;
  fail("{}: --keep-quantized={} is not one of auto, yes, no", command, name);
}

namespace {

// The checkpoint's own compute dtype (EngineOptions::dtype unset), from its config.json or,
// for a GGUF file, its tensors' types.
DType checkpoint_dtype(const nlohmann::json& config) {
  for (const char* key : {"torch_dtype", "dtype"}) {
    auto it = config.find(key);
    if (it != config.end() && it->is_string() && *it == "bfloat16") return DType::bf16;
  }
  return DType::f32;
}
DType checkpoint_dtype(const io::GgufHeader& header) {
  for (const io::GgufTensor& t : header.tensors) {
    if (t.type != quant::GgmlType::F32) return DType::bf16;
  }
  return DType::f32;
}

// The store's floating-point matrices quantized and dequantized back as they load
// (io::StoredTensor::round_trip), each to the type `prism quantize` would give it.
io::Store round_trip(const io::Store& store, quant::GgmlType type) {
  std::vector<std::pair<std::string, io::StoredTensor>> tensors;
  for (const std::string& name : store.names()) {
    io::StoredTensor t = store.at(name);
    const std::optional<DType> dtype = io::to_core_dtype(t.info.dtype);
    if (t.info.shape.size() == 2 && dtype && is_float(*dtype)) {
      t.round_trip = quant::type_for_tensor(type, t.info.shape);
    }
    tensors.emplace_back(name, std::move(t));
  }
  return io::Store::from_tensors(store.uri(), std::move(tensors));
}

// The store's matrices in a block format (a GGUF file's quantized tensors, --quantize's) that
// the model keeps in it: all of them where the platform runs the dequantize op itself (or
// `everywhere`), on one device, but those whose blocks hold other columns or values than the
// model's (Qwen 3.5's ssm_out in llama.cpp's value-head order: io::StoredTensor::rearranged),
// dequantized.
std::map<std::string, quant::GgmlType, std::less<>> kept_quantized(const io::Store& store,
                                                                   const Platform& platform,
                                                                   const Mesh& mesh,
                                                                   bool everywhere) {
  std::map<std::string, quant::GgmlType, std::less<>> kept;
  if (mesh.devices() > 1) return kept;
  for (const std::string& name : store.names()) {
    const io::StoredTensor& t = store.at(name);
    const std::optional<quant::GgmlType> format = t.round_trip ? t.round_trip : t.blocks;
    if (!format || t.info.shape.size() != 2 || (!t.round_trip && t.rearranged())) continue;
    const quant::GgmlTypeInfo& type = quant::info(*format);
    if (type.block_elements == 1 || t.info.shape[1] % type.block_elements != 0) continue;
    const ir::Node probe{ir::Op::dequantize,
                         Shape(DType::f32, {{"r", 1}, {"c", type.block_elements}}),
                         {},
                         ir::DequantizeAttrs{*format}};
    if (everywhere || platform.supports(probe)) kept.emplace(name, *format);
  }
  return kept;
}

// The weights in the layouts the programs read them in: every window's step reads them alike
// (`step`'s layouts serve them all), the draft head's step (where there is one) its own too.
std::vector<io::Weights> prepare_for(const ShardedExecutable& step,
                                     const std::optional<ShardedExecutable>& draft,
                                     std::vector<io::Weights> weights) {
  weights = step.prepare(std::move(weights));
  return draft ? draft->prepare(std::move(weights)) : weights;
}

}  // namespace

Engine::Checkpoint Engine::open(const std::string& model_uri, const EngineOptions& options) {
  if (options.quantize) {
    PRISM_CHECK(quant::can_quantize(*options.quantize),
                "llm: no quantization to {} (q8_0, q4_0 and q4_k are)",
                quant::name(*options.quantize));
    PRISM_CHECK(!is_gguf_uri(model_uri),
                "llm: --quantize takes a safetensors checkpoint; {} is a GGUF file, already in "
                "its types",
                model_uri);
  }
  if (is_gguf_uri(model_uri)) {
    std::shared_ptr<io::File> file = io::open(model_uri);
    io::GgufHeader header = io::GgufHeader::read(*file);
    const DType dtype = options.dtype.value_or(checkpoint_dtype(header));
    GgufModel gguf = open_gguf_model(std::move(file), std::move(header), dtype);
    models::ModelInfo info = gguf.model->info();
    return {std::move(gguf.model), std::move(info), std::move(gguf.store)};
  }
  io::Store store = io::Store::open(model_uri);
  if (options.quantize) store = round_trip(store, *options.quantize);
  std::string config_uri = io::join(model_uri, "config.json");
  const nlohmann::json config = read_json(config_uri);
  std::unique_ptr<models::CausalLM> model =
      models::make_causal_lm(config, config_uri, options.dtype.value_or(checkpoint_dtype(config)));
  models::ModelInfo info = model->info();
  std::string generation_uri = io::join(model_uri, "generation_config.json");
  if (io::exists(generation_uri)) {  // its eos ids join config.json's
    nlohmann::json g = read_json(generation_uri);
    if (g.contains("eos_token_id")) info.add_eos_token_ids(g["eos_token_id"]);
  }
  return {std::move(model), std::move(info), std::move(store)};
}

Engine::Engine(const std::string& model_uri, Platform& platform, const EngineOptions& options)
    : Engine(open(model_uri, options), platform, options) {}

Engine::Engine(Checkpoint checkpoint, Platform& platform, const EngineOptions& options)
    : platform_(platform),
      options_(options),
      model_(std::move(checkpoint.model)),
      info_(std::move(checkpoint.info)),
      store_(std::move(checkpoint.store)) {
  PRISM_CHECK(options.seqlen >= 1 && options.seqlen <= info_.max_positions,
              "llm: --seqlen={} must be between 1 and the model's {} positions", options.seqlen,
              info_.max_positions);
  if (options.draft_head) model_->use_draft_head();
  state_specs_ = model_->state_specs(options.seqlen);
  for (size_t i = 0; i < state_specs_.size(); ++i) {
    if (!state_specs_[i].positional) carried_.push_back(i);
  }
  if (options.keep_quantized.value_or(true)) {
    model_->set_quantized_weights(
        kept_quantized(store_, platform_, options_.mesh, options.keep_quantized.has_value()));
  }
  // Every window's executable reads the same weights: load them for the first one.
  ShardedExecutable& first = executable(1, models::Logits::last);
  devices_ = first.devices();
  // A mesh axis nothing is split over would only copy the model: surely not what was meant.
  for (size_t a = 0; a < options_.mesh.axes().size(); ++a) {
    bool used = options_.mesh.axes()[a].size == 1;
    for (const ShardedExecutable::Parameter& p : first.parameters()) {
      for (int axis : p.split) used = used || axis == static_cast<int>(a);
    }
    PRISM_CHECK(used, "llm: mesh axis '{}' splits nothing in this {} model (it splits over '{}')",
                options_.mesh.axes()[a].name, info_.model_type, models::kModelAxis);
  }
  slots_.push_back(new_slot());
  // The weights the programs read: every window's step reads the same; the draft head's step
  // some of those and its own.
  if (options.draft_head) {
    draft_ = compile_draft_step(platform_, *model_, options_.seqlen, options_.mesh,
                                options_.compile_cache.get());
  }
  auto joined = [&](auto parameters, const auto& more) {
    for (const auto& p : more) {
      if (std::none_of(parameters.begin(), parameters.end(),
                       [&](const auto& q) { return q.name == p.name; })) {
        parameters.push_back(p);
      }
    }
    return parameters;
  };
  if (options_.mesh.devices() == 1) {
    const std::vector<Executable::Parameter> device_parameters =
        draft_ ? joined(first.device(0).parameters(), draft_->device(0).parameters())
               : first.device(0).parameters();
    io::LoadOptions load = options.load;
    load.zero_copy = load.zero_copy || options.fast_start;
    io::LoadStats stats;
    weights_.push_back(io::load(store_, device_parameters, platform_, load, &stats));
    if (options.fast_start && !options.load.zero_copy && stats.zero_copy > 0) {
      if (options.load.report) {
        std::fprintf(stderr,
                     "fast start: the first answer reads %zu of these tensors from the file; "
                     "later ones read a copy, made after it\n",
                     stats.zero_copy);
      }
      load.zero_copy = false;
      load.progress = load.report = false;
      load.cancel = &stop_copying_;
      copy_ = [this, &first, device_parameters, load] {
        std::vector<io::Weights> copies;
        copies.push_back(io::load(store_, device_parameters, platform_, load));
        return prepare_for(first, draft_, std::move(copies));
      };
    }
  } else {
    weights_ = io::load_sharded(
        store_, draft_ ? joined(first.parameters(), draft_->parameters()) : first.parameters(),
        options_.mesh, devices_, options.load, nullptr, first.first_device());
  }
  weights_ = prepare_for(first, draft_, std::move(weights_));
  if (first.spans_processes()) {
    processes_ = Processes::get();
    std::lock_guard lock(engines_mutex());
    id_ = next_engine()++;
    engines()[id_] = this;
  }
}

Engine::~Engine() {
  stop_copying_ = true;
  if (copies_.valid()) copies_.wait();
  if (id_ >= 0) {
    std::lock_guard lock(engines_mutex());
    engines().erase(id_);
  }
}

// A call as bytes: the engine, the call, the counts of args and tokens, then them.
Processes::Lead Engine::lead(Call op, std::span<const int64_t> args,
                             std::span<const int32_t> tokens) {
  if (!processes_) return {};
  std::vector<std::byte> command(4 * sizeof(int32_t) + args.size_bytes() + tokens.size_bytes());
  const int32_t head[4] = {id_, static_cast<int32_t>(op), static_cast<int32_t>(args.size()),
                           static_cast<int32_t>(tokens.size())};
  std::byte* at = command.data();
  std::memcpy(at, head, sizeof head);
  at += sizeof head;
  if (!args.empty()) std::memcpy(at, args.data(), args.size_bytes());
  at += args.size_bytes();
  if (!tokens.empty()) std::memcpy(at, tokens.data(), tokens.size_bytes());
  return processes_->lead(command);
}

void follow_leader() {
  Processes* processes = Processes::get();
  PRISM_CHECK(processes && processes->rank() != 0,
              "llm: only the followers of a run of several processes follow rank 0");
  processes->follow([](std::span<const std::byte> command) {
    int32_t head[4];
    PRISM_CHECK(command.size() >= sizeof head, "llm: a command of {} bytes from rank 0",
                command.size());
    std::memcpy(head, command.data(), sizeof head);
    const size_t args = static_cast<size_t>(head[2]), tokens = static_cast<size_t>(head[3]);
    PRISM_CHECK(
        head[2] >= 0 && head[3] >= 0 &&
            command.size() == sizeof head + args * sizeof(int64_t) + tokens * sizeof(int32_t),
        "llm: a command of {} bytes from rank 0 does not hold what it says", command.size());
    std::vector<int64_t> a(args);
    std::vector<int32_t> t(tokens);
    if (args) std::memcpy(a.data(), command.data() + sizeof head, args * sizeof(int64_t));
    if (tokens) {
      std::memcpy(t.data(), command.data() + sizeof head + args * sizeof(int64_t),
                  tokens * sizeof(int32_t));
    }
    Engine* engine = nullptr;
    {
      std::lock_guard lock(engines_mutex());
      auto it = engines().find(head[0]);
      PRISM_CHECK(it != engines().end(),
                  "llm: rank 0 calls engine {}, which this process has not made (every process "
                  "makes the same engines, in the same order)",
                  head[0]);
      engine = it->second;
    }
    engine->obey(static_cast<Engine::Call>(head[1]), a, t);
  });
}

void Engine::obey(Call op, std::span<const int64_t> args, std::span<const int32_t> tokens) {
  auto arg = [&](size_t i) {
    PRISM_CHECK(i < args.size(), "llm: rank 0's call {} has {} arguments", static_cast<int>(op),
                args.size());
    return args[i];
  };
  switch (op) {
    case Call::set_slots:
      return set_slots(static_cast<int>(arg(0)));
    case Call::feed:
      feed(static_cast<int>(arg(0)), tokens);
      return;
    case Call::feed_every:
      feed_every(static_cast<int>(arg(0)), tokens, arg(1) != 0);
      return;
    case Call::reset:
      return reset(static_cast<int>(arg(0)));
    case Call::rewind:
      return rewind(static_cast<int>(arg(0)), arg(1));
    case Call::decode: {
      std::vector<int> slots(args.begin(), args.end());
      decode(slots, tokens);
      return;
    }
    case Call::draft:
      draft(static_cast<int>(arg(0)), static_cast<int32_t>(arg(1)), arg(2));
      return;
    case Call::share:
      share(static_cast<int>(arg(0)), static_cast<int>(arg(1)), arg(2));
      return;
  }
  fail("llm: rank 0 made call {}, which this process does not know", static_cast<int>(op));
}

uint64_t Engine::device_bytes() const {
  uint64_t bytes = 0;
  for (const io::Weights& w : weights_) {
    for (const auto& [name, buffer] : w) bytes += buffer.shape().bytes();
  }
  for (const Slot& slot : slots_) {
    for (const std::vector<Buffer>& device : slot.states) {
      for (const Buffer& b : device) bytes += b.shape().bytes();
    }
  }
  return bytes;
}

void Engine::take_copies() {
  if (!copies_.valid()) return;
  const auto start = std::chrono::steady_clock::now();
  weights_ = copies_.get();
  copy_wait_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Engine::start_copying() {
  if (!copy_) return;
  // Not before: sharing the cores and memory with the copy made the first prefill of a 1B model
  // 7-10 times slower, later than copying first.
  copies_ = std::async(std::launch::async, std::move(copy_));
  copy_ = nullptr;
}

namespace {

// The step's inputs that it updates in place: every state for a step that returns the last
// token's logits; for one that returns every token's (speculative decoding's check), only the
// positional ones, so that the others, as they were before it, stay for Engine::rewind.
std::vector<bool> donated_states(const std::vector<models::StateSpec>& specs,
                                 models::Logits which) {
  std::vector<bool> donated;
  for (const models::StateSpec& s : specs) {
    donated.push_back(which == models::Logits::last || s.positional);
  }
  return donated;
}

}  // namespace

Executable compile_step(Platform& platform, const models::CausalLM& model, int64_t window,
                        int64_t seqlen, CompileCache* cache, models::Logits which) {
  std::vector<Shape> inputs{Shape(DType::i32, {{"s", window}}), Shape::scalar(DType::i32),
                            Shape::scalar(DType::i32)};
  CompileOptions options{.cache = cache};
  const std::vector<models::StateSpec> specs = model.state_specs(seqlen);
  const std::vector<bool> donated = donated_states(specs, which);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (donated[i]) options.donate.push_back(static_cast<int>(inputs.size()));
    inputs.push_back(specs[i].shape);
  }
  TraceFn fn = [&model, which](std::span<const Tensor> in) {
    return model.forward(in[0], in[1], in[2], in.subspan(3), which);
  };
  return compile(platform, fn, inputs, options);
}

ShardedExecutable compile_sharded_step(Platform& platform, const models::CausalLM& model,
                                       int64_t window, int64_t seqlen, const Mesh& mesh,
                                       CompileCache* cache, models::Logits which) {
  std::vector<Shape> inputs{Shape(DType::i32, {{"s", window}}), Shape::scalar(DType::i32),
                            Shape::scalar(DType::i32)};
  ShardedCompileOptions options{
      .mesh = mesh, .inputs = {{}, {}, {}}, .outputs = {std::nullopt}, .cache = cache};
  const std::vector<models::StateSpec> specs = model.state_specs(seqlen);
  const std::vector<bool> donated = donated_states(specs, which);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (donated[i]) options.donate.push_back(static_cast<int>(inputs.size()));
    inputs.push_back(specs[i].shape);
    options.inputs.push_back(specs[i].sharding);
    options.outputs.push_back(specs[i].sharding);  // as every step takes it in
  }
  TraceFn fn = [&model, which](std::span<const Tensor> in) {
    return model.forward(in[0], in[1], in[2], in.subspan(3), which);
  };
  return compile_sharded(platform, fn, inputs, options);
}

Engine::Slot Engine::new_slot() {
  ShardedExecutable& first = executable(1, models::Logits::last);
  Slot slot;
  slot.states.resize(devices_.size());
  for (size_t i = 0; i < state_specs_.size(); ++i) {
    const compiler::Split& split = first.input_splits()[3 + i];
    const Shape local = local_shape(state_specs_[i].shape, split, options_.mesh);
    for (size_t k = 0; k < devices_.size(); ++k) {
      slot.states[k].push_back(devices_[k]->allocate(local));
    }
  }
  return slot;
}

void Engine::set_slots(int n) {
  PRISM_CHECK(n >= 1, "llm: {} slots: at least one", n);
  const int64_t args[] = {n};
  auto leading = lead(Call::set_slots, args);
  while (static_cast<int>(slots_.size()) > n) slots_.pop_back();
  while (static_cast<int>(slots_.size()) < n) slots_.push_back(new_slot());
}

void Engine::reset(int slot_index) {
  PRISM_CHECK(slot_index >= 0 && slot_index < slots(), "llm: no slot {} ({} slots)", slot_index,
              slots());
  const int64_t args[] = {slot_index};
  auto leading = lead(Call::reset, args);
  Slot& slot = slots_[slot_index];
  slot.position = 0;
  slot.pending.clear();
  slot.before.clear();
  slot.since.clear();
  // Positional states (KV caches) are overwritten as positions are reused. The others start
  // again from zeros, written by a compiled fill into the buffers they donate: a reset is a
  // program like every step, so it needs no write into device memory from outside (PJRT's
  // buffers cannot take one), and the states keep their buffers for the engine's whole life.
  if (carried_.empty()) return;
  if (!reset_) {
    ShardedCompileOptions options{.mesh = options_.mesh, .cache = options_.compile_cache.get()};
    std::vector<Shape> shapes;
    for (size_t k = 0; k < carried_.size(); ++k) {
      options.donate.push_back(static_cast<int>(k));
      options.inputs.push_back(state_specs_[carried_[k]].sharding);
      options.outputs.push_back(state_specs_[carried_[k]].sharding);
      shapes.push_back(state_specs_[carried_[k]].shape);
    }
    // Zeros computed from each state (whatever it holds), not a constant: on a mesh each
    // output is then split as its state is, and each device writes its own shard's.
    TraceFn zeros = [](std::span<const Tensor> states) {
      std::vector<Tensor> out;
      for (const Tensor& s : states) {
        const Tensor zero = Tensor::scalar(0, s.dtype());
        out.push_back(select(s.is_nan(), zero, zero));
      }
      return out;
    };
    reset_ = compile_sharded(platform_, zeros, shapes, options);
  }
  std::vector<std::vector<Buffer>> in(devices_.size());
  for (size_t d = 0; d < devices_.size(); ++d) {
    for (size_t i : carried_) in[d].push_back(slot.states[d][i]);
  }
  std::vector<io::Weights> none(devices_.size());
  std::vector<std::vector<Buffer>> out = reset_->call(none, in);
  for (size_t d = 0; d < devices_.size(); ++d) {
    for (size_t k = 0; k < carried_.size(); ++k) {
      slot.states[d][carried_[k]] = std::move(out[d][k]);
    }
  }
}

int64_t prefill_window(int64_t remaining, int64_t room, bool compiles_quickly) {
  if (!compiles_quickly) return padded_window(kWindows, remaining, room);
  int64_t window = padded_window(kFineWindows, remaining, room);
  if (4 * remaining < 3 * window) {
    for (int64_t w : kFineWindows) window = w <= remaining ? w : window;
  }
  return window;
}

ShardedExecutable& Engine::executable(int64_t window, models::Logits which) {
  auto it = executables_.find({window, which});
  if (it != executables_.end()) return it->second;
  return executables_
      .emplace(std::pair{window, which},
               compile_sharded_step(platform_, *model_, window, options_.seqlen, options_.mesh,
                                    options_.compile_cache.get(), which))
      .first->second;
}

int64_t Engine::position(int slot) const {
  const Slot& s = slots_.at(slot);
  return s.position + static_cast<int64_t>(s.pending.size());
}

std::vector<float> Engine::feed(int slot, std::span<const int32_t> tokens) {
  return run(slot, tokens, models::Logits::last, false);
}

std::vector<float> Engine::feed_every(int slot, std::span<const int32_t> tokens, bool extend) {
  return run(slot, tokens, models::Logits::every, extend);
}

std::vector<float> Engine::run(int slot_index, std::span<const int32_t> given, models::Logits which,
                               bool extend) {
  PRISM_CHECK(slot_index >= 0 && slot_index < slots(), "llm: no slot {} ({} slots)", slot_index,
              slots());
  PRISM_CHECK(!given.empty(), "llm: nothing to feed");
  const int64_t needed = position(slot_index) + static_cast<int64_t>(given.size());
  PRISM_CHECK(needed <= options_.seqlen,
              "llm: the conversation needs {} positions but the cache holds {} (--seqlen)", needed,
              options_.seqlen);
  for (int32_t t : given) {
    PRISM_CHECK(t >= 0 && t < info_.vocab_size, "llm: token id {} is outside the vocabulary of {}",
                t, info_.vocab_size);
  }
  const int64_t args[] = {slot_index, extend};
  auto leading = lead(which == models::Logits::every ? Call::feed_every : Call::feed, args, given);
  take_copies();
  Slot& slot = slots_[slot_index];
  // The tokens a rewind kept but not their states run first; their logits are not returned.
  std::vector<int32_t> tokens = std::move(slot.pending);
  slot.pending.clear();
  const int64_t skip = static_cast<int64_t>(tokens.size());
  tokens.insert(tokens.end(), given.begin(), given.end());
  const int64_t n = static_cast<int64_t>(tokens.size());
  const bool every = which == models::Logits::every;
  // What a rewind needs after feed_every: the states the step does not update in place (those
  // that are not positional) as they are now, the position and the tokens from there; or,
  // extending the last feed_every's, those it kept, and these tokens after its own.
  if (every && extend && !slot.before.empty()) {
    slot.since.insert(slot.since.end(), given.begin(), given.end());
  } else {
    slot.before.clear();
    slot.since.clear();
  }
  if (every && slot.before.empty()) {
    slot.before.resize(devices_.size());
    for (size_t d = 0; d < devices_.size(); ++d) {
      for (size_t i : carried_) slot.before[d].push_back(slot.states[d][i]);
    }
    slot.before_position = slot.position;
    slot.since = tokens;
  }
  int64_t& position = slot.position;
  std::vector<float> logits;
  for (int64_t done = 0; done < n;) {
    const int64_t remaining = n - done, room = options_.seqlen - position;
    const int64_t window = every ? padded_window(kCheckWindows, remaining, room)
                                 : prefill_window(remaining, room, platform_.compiles_quickly());
    int64_t chunk = std::min(remaining, window);
    HostBuffer ids(Shape(DType::i32, {{"s", window}}));
    std::copy(tokens.begin() + done, tokens.begin() + done + chunk, ids.as<int32_t>().begin());
    const HostBuffer at =
        HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {static_cast<int32_t>(position)});
    const HostBuffer last =
        HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {static_cast<int32_t>(chunk - 1)});
    ShardedExecutable& exe = executable(window, which);
    std::vector<std::vector<Buffer>> in(devices_.size());
    for (size_t d = 0; d < devices_.size(); ++d) {
      in[d] = {devices_[d]->upload(ids), devices_[d]->upload(at), devices_[d]->upload(last)};
      in[d].insert(in[d].end(), slot.states[d].begin(), slot.states[d].end());
      slot.states[d].clear();  // donated, or kept in `before`: the outputs are the states now
    }
    std::vector<std::vector<Buffer>> out = exe.call(weights_, in);
    for (size_t d = 0; d < devices_.size(); ++d)
      slot.states[d].assign(out[d].begin() + 1, out[d].end());
    // The logits, assembled where the LM head splits them by vocabulary.
    HostBuffer l = exe.output_to_host(out, 0);
    const std::span<const float> all = l.as<float>();
    if (every) {  // {window, voc}: the real rows, past the skipped ones
      const int64_t vocab = static_cast<int64_t>(all.size()) / window;
      const int64_t first = std::max<int64_t>(skip - done, 0);
      if (first < chunk) {
        logits.insert(logits.end(), all.begin() + first * vocab, all.begin() + chunk * vocab);
      }
    } else {
      logits.assign(all.begin(), all.end());
    }
    position += chunk;
    done += chunk;
  }
  start_copying();
  return logits;
}

bool Engine::can_rewind(int slot_index, int64_t to) const {
  PRISM_CHECK(slot_index >= 0 && slot_index < slots(), "llm: no slot {} ({} slots)", slot_index,
              slots());
  const Slot& slot = slots_[slot_index];
  if (to < 0 || to > position(slot_index)) return false;
  // KV caches alone: what lies past `to` is overwritten before anything reads it.
  return carried_.empty() || to == position(slot_index) ||
         (!slot.before.empty() && to >= slot.before_position);
}

void Engine::rewind(int slot_index, int64_t to) {
  PRISM_CHECK(slot_index >= 0 && slot_index < slots(), "llm: no slot {} ({} slots)", slot_index,
              slots());
  const int64_t now = position(slot_index);
  PRISM_CHECK(to >= 0 && to <= now, "llm: cannot rewind to position {}: the conversation is at {}",
              to, now);
  Slot& slot = slots_[slot_index];
  PRISM_CHECK(can_rewind(slot_index, to),
              "llm: cannot rewind to position {}: the states are kept back to the start of the "
              "last feed_every only ({})",
              to, slot.before.empty() ? now : slot.before_position);
  const int64_t args[] = {slot_index, to};
  auto leading = lead(Call::rewind, args);
  if (to == now) return;
  if (carried_.empty()) {
    slot.position = to;
    return;
  }
  for (size_t d = 0; d < devices_.size(); ++d) {
    for (size_t k = 0; k < carried_.size(); ++k) slot.states[d][carried_[k]] = slot.before[d][k];
  }
  slot.position = slot.before_position;
  slot.since.resize(static_cast<size_t>(to - slot.before_position));
  slot.pending = slot.since;
}

bool Engine::can_share(int from, int64_t to) const {
  PRISM_CHECK(from >= 0 && from < slots(), "llm: no slot {} ({} slots)", from, slots());
  const Slot& slot = slots_[from];
  if (to <= 0 || to > position(from)) return false;
  return carried_.empty() || (to == slot.position && slot.pending.empty());
}

void Engine::share(int from, int to, int64_t position) {
  PRISM_CHECK(from >= 0 && from < slots() && to >= 0 && to < slots() && from != to,
              "llm: cannot share slot {}'s conversation with slot {} ({} slots)", from, to,
              slots());
  const int64_t holds = this->position(from);
  PRISM_CHECK(position > 0 && position <= holds,
              "llm: slot {} cannot share its first {} tokens: it holds {}", from, position, holds);
  PRISM_CHECK(can_share(from, position),
              "llm: slot {} cannot share its first {} of {} tokens: its recurrent states hold the "
              "end of its conversation",
              from, position, holds);
  const int64_t args[] = {from, to, position};
  auto leading = lead(Call::share, args);
  // The positions copied: a power of two from 16 on, so that few programs serve every length.
  int64_t window = 16;
  while (window < position) window *= 2;
  window = std::min(window, options_.seqlen);
  auto it = share_.find(window);
  if (it == share_.end()) {
    // Inputs: `from`'s states, then `to`'s (donated). Outputs: `to`'s, its positional states
    // with their first `window` positions from `from`'s, the others `from`'s.
    ShardedCompileOptions options{.mesh = options_.mesh, .cache = options_.compile_cache.get()};
    std::vector<Shape> shapes;
    for (int side = 0; side < 2; ++side) {
      for (const models::StateSpec& spec : state_specs_) {
        if (side == 1) options.donate.push_back(static_cast<int>(shapes.size()));
        shapes.push_back(spec.shape);
        options.inputs.push_back(spec.sharding);
      }
    }
    for (const models::StateSpec& spec : state_specs_) options.outputs.push_back(spec.sharding);
    const std::vector<models::StateSpec> specs = state_specs_;
    TraceFn copy = [specs, window](std::span<const Tensor> in) {
      const size_t n = specs.size();
      std::vector<Tensor> out;
      for (size_t i = 0; i < n; ++i) {
        const Tensor& source = in[i];
        const Tensor& into = in[n + i];
        if (specs[i].positional) {
          const Tensor start = Tensor::scalar(0, DType::i32);
          out.push_back(into.dynamic_update_slice(source.slice(models::kPositionAxis, 0, window),
                                                  {{models::kPositionAxis, start}}));
        } else {
          // Computed from `into` too, so that the result takes its donated buffer.
          out.push_back(select(into.is_nan(), source, source));
        }
      }
      return out;
    };
    it = share_.emplace(window, compile_sharded(platform_, copy, shapes, options)).first;
  }
  Slot& dst = slots_[to];
  const Slot& src = slots_[from];
  std::vector<std::vector<Buffer>> in(devices_.size());
  for (size_t d = 0; d < devices_.size(); ++d) {
    in[d] = src.states[d];
    in[d].insert(in[d].end(), dst.states[d].begin(), dst.states[d].end());
  }
  std::vector<io::Weights> none(devices_.size());
  std::vector<std::vector<Buffer>> out = it->second.call(none, in);
  for (size_t d = 0; d < devices_.size(); ++d) dst.states[d] = std::move(out[d]);
  dst.position = position;
  dst.pending.clear();
  dst.before.clear();
  dst.since.clear();
}

ShardedExecutable compile_draft_step(Platform& platform, const models::CausalLM& model,
                                     int64_t seqlen, const Mesh& mesh, CompileCache* cache) {
  const std::vector<models::StateSpec> specs = model.state_specs(seqlen);
  const size_t own = model.draft_states();
  PRISM_CHECK(own > 0 && own <= specs.size(), "llm: the {} model runs no draft head",
              model.info().model_type);
  std::vector<Shape> inputs{Shape(DType::i32, {{"s", 1}}), Shape::scalar(DType::i32)};
  ShardedCompileOptions options{
      .mesh = mesh, .inputs = {{}, {}}, .outputs = {std::nullopt}, .cache = cache};
  for (size_t i = specs.size() - own; i < specs.size(); ++i) {
    options.donate.push_back(static_cast<int>(inputs.size()));
    inputs.push_back(specs[i].shape);
    options.inputs.push_back(specs[i].sharding);
    options.outputs.push_back(specs[i].sharding);
  }
  TraceFn fn = [&model](std::span<const Tensor> in) {
    return model.draft_step(in[0], in[1], in.subspan(2));
  };
  return compile_sharded(platform, fn, inputs, options);
}

std::vector<int32_t> Engine::draft(int slot_index, int32_t next, int64_t count) {
  PRISM_CHECK(slot_index >= 0 && slot_index < slots(), "llm: no slot {} ({} slots)", slot_index,
              slots());
  PRISM_CHECK(draft_, "llm: the engine runs no draft head (EngineOptions::draft_head)");
  const int64_t at = position(slot_index);
  PRISM_CHECK(at >= 1, "llm: the draft head guesses after a token the model has run");
  PRISM_CHECK(next >= 0 && next < info_.vocab_size,
              "llm: token id {} is outside the vocabulary of {}", next, info_.vocab_size);
  const int64_t args[] = {slot_index, next, count};
  auto leading = lead(Call::draft, args);
  take_copies();
  Slot& slot = slots_[slot_index];
  // Step i reads the hidden state at at - 1 + i and writes the head's at at + i: within the
  // cache. Nothing the slot's conversation holds changes: the head writes at the positions of
  // the hidden states it reads, past those of the conversation but its last, whose entry is
  // the one the model's next step writes.
  count = std::min(count, options_.seqlen - at);
  const size_t head_first = state_specs_.size() - model_->draft_states();  // its states
  std::vector<int32_t> guesses;
  int32_t token = next;
  for (int64_t i = 0; i < count; ++i) {
    const HostBuffer id = HostBuffer::from<int32_t>(Shape(DType::i32, {{"s", 1}}), {token});
    const HostBuffer where =
        HostBuffer::from<int32_t>(Shape::scalar(DType::i32), {static_cast<int32_t>(at - 1 + i)});
    std::vector<std::vector<Buffer>> in(devices_.size());
    for (size_t d = 0; d < devices_.size(); ++d) {
      in[d] = {devices_[d]->upload(id), devices_[d]->upload(where)};
      for (size_t k = head_first; k < state_specs_.size(); ++k)
        in[d].push_back(std::move(slot.states[d][k]));
    }
    std::vector<std::vector<Buffer>> out = draft_->call(weights_, in);
    for (size_t d = 0; d < devices_.size(); ++d) {
      for (size_t k = head_first; k < state_specs_.size(); ++k) {
        slot.states[d][k] = std::move(out[d][1 + k - head_first]);
      }
    }
    const HostBuffer logits = draft_->output_to_host(out, 0);
    const std::span<const float> l = logits.as<float>();
    token = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    guesses.push_back(token);
  }
  return guesses;
}

ShardedExecutable compile_decode_batch(Platform& platform, const models::CausalLM& model,
                                       int64_t batch, int64_t seqlen, const Mesh& mesh,
                                       CompileCache* cache) {
  const std::vector<models::StateSpec> specs = model.state_specs(seqlen);
  std::vector<Shape> inputs{Shape(DType::i32, {{"b", batch}}), Shape(DType::i32, {{"b", batch}})};
  ShardedCompileOptions options{
      .mesh = mesh, .inputs = {{}, {}}, .outputs = {std::nullopt}, .cache = cache};
  for (int64_t i = 0; i < batch; ++i) {
    for (const models::StateSpec& spec : specs) {
      options.donate.push_back(static_cast<int>(inputs.size()));
      inputs.push_back(spec.shape);
      options.inputs.push_back(spec.sharding);
      options.outputs.push_back(spec.sharding);
    }
  }
  const size_t per = specs.size();
  TraceFn fn = [&model, batch, per](std::span<const Tensor> in) {
    std::vector<std::vector<Tensor>> states(batch);
    for (int64_t i = 0; i < batch; ++i) {
      auto first = in.begin() + 2 + i * static_cast<std::ptrdiff_t>(per);
      states[i].assign(first, first + static_cast<std::ptrdiff_t>(per));
    }
    return model.decode_batch(in[0], in[1], states);
  };
  return compile_sharded(platform, fn, inputs, options);
}

std::vector<std::vector<float>> Engine::decode(std::span<const int> slot_ids,
                                               std::span<const int32_t> tokens) {
  PRISM_CHECK(slot_ids.size() == tokens.size() && !tokens.empty(), "llm: {} tokens for {} slots",
              tokens.size(), slot_ids.size());
  // Every slot and token checked before anything runs (and before rank 0 tells the others).
  for (size_t i = 0; i < slot_ids.size(); ++i) {
    const int s = slot_ids[i];
    PRISM_CHECK(s >= 0 && s < slots(), "llm: no slot {} ({} slots)", s, slots());
    for (size_t j = 0; j < i; ++j) PRISM_CHECK(slot_ids[j] != s, "llm: slot {} twice in a step", s);
    PRISM_CHECK(position(s) + 1 <= options_.seqlen,
                "llm: the conversation needs {} positions but the cache holds {} (--seqlen)",
                position(s) + 1, options_.seqlen);
    PRISM_CHECK(tokens[i] >= 0 && tokens[i] < info_.vocab_size,
                "llm: token id {} is outside the vocabulary of {}", tokens[i], info_.vocab_size);
  }
  const std::vector<int64_t> args(slot_ids.begin(), slot_ids.end());
  auto leading = lead(Call::decode, args, tokens);
  take_copies();
  std::vector<std::vector<float>> logits;
  const bool pending = std::any_of(slot_ids.begin(), slot_ids.end(),
                                   [&](int s) { return !slots_[s].pending.empty(); });
  if (!model_->batches() || slot_ids.size() == 1 || pending) {
    for (size_t i = 0; i < slot_ids.size(); ++i) {
      logits.push_back(feed(slot_ids[i], tokens.subspan(i, 1)));
    }
    return logits;
  }
  const int64_t batch = static_cast<int64_t>(slot_ids.size());
  std::vector<int32_t> at;
  for (int s : slot_ids) at.push_back(static_cast<int32_t>(slots_[s].position));
  auto it = batch_executables_.find(batch);
  if (it == batch_executables_.end()) {
    it = batch_executables_
             .emplace(batch, compile_decode_batch(platform_, *model_, batch, options_.seqlen,
                                                  options_.mesh, options_.compile_cache.get()))
             .first;
  }
  ShardedExecutable& exe = it->second;
  const HostBuffer ids = HostBuffer::from<int32_t>(
      Shape(DType::i32, {{"b", batch}}), std::vector<int32_t>(tokens.begin(), tokens.end()));
  const HostBuffer positions = HostBuffer::from<int32_t>(Shape(DType::i32, {{"b", batch}}), at);
  std::vector<std::vector<Buffer>> in(devices_.size());
  for (size_t d = 0; d < devices_.size(); ++d) {
    in[d] = {devices_[d]->upload(ids), devices_[d]->upload(positions)};
    for (int s : slot_ids) {
      in[d].insert(in[d].end(), slots_[s].states[d].begin(), slots_[s].states[d].end());
      slots_[s].states[d].clear();  // donated: the outputs are the states now
    }
  }
  for (int s : slot_ids) slots_[s].before.clear();
  std::vector<std::vector<Buffer>> out = exe.call(weights_, in);
  const size_t per = state_specs_.size();
  for (size_t d = 0; d < devices_.size(); ++d) {
    for (size_t i = 0; i < slot_ids.size(); ++i) {
      auto first = out[d].begin() + 1 + static_cast<std::ptrdiff_t>(i * per);
      slots_[slot_ids[i]].states[d].assign(first, first + static_cast<std::ptrdiff_t>(per));
    }
  }
  for (int s : slot_ids) ++slots_[s].position;
  // The logits {b, voc}, assembled where the LM head splits them by vocabulary.
  HostBuffer l = exe.output_to_host(out, 0);
  const int64_t vocab = l.shape().numel() / batch;
  for (int64_t i = 0; i < batch; ++i) {
    logits.emplace_back(l.as<float>().begin() + i * vocab, l.as<float>().begin() + (i + 1) * vocab);
  }
  return logits;
}

}  // namespace prism::llm
