#include "prism/backends/pjrt/pjrt_platform.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "prism/backends/pjrt/stablehlo.h"
#include "prism/core/error.h"
#include "prism/runtime/collectives.h"

namespace prism::pjrt {

using ir::Op;
using ir::ValueId;

namespace {

PJRT_Buffer_Type buffer_type(DType t) {
  switch (t) {
    case DType::f64:
      return PJRT_Buffer_Type_F64;
    case DType::f32:
      return PJRT_Buffer_Type_F32;
    case DType::f16:
      return PJRT_Buffer_Type_F16;
    case DType::bf16:
      return PJRT_Buffer_Type_BF16;
    case DType::i64:
      return PJRT_Buffer_Type_S64;
    case DType::i32:
      return PJRT_Buffer_Type_S32;
    case DType::i16:
      return PJRT_Buffer_Type_S16;
    case DType::i8:
      return PJRT_Buffer_Type_S8;
    case DType::u8:
      return PJRT_Buffer_Type_U8;
    case DType::u32:
      return PJRT_Buffer_Type_U32;
    case DType::boolean:
      return PJRT_Buffer_Type_PRED;
  }
  return PJRT_Buffer_Type_INVALID;
}

// The serialized CompileOptionsProto: executable_build_options (field 3) with num_replicas
// (field 4) and num_partitions (field 5) both 1. Plugins abort on an empty one.
constexpr char kCompileOptions[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01};

bool is_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The entries of folder `dir` whose names start with `prefix`, sorted.
std::vector<std::string> entries(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) names.push_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The first `<package>/<folder>*/<file>` under <prefix>/lib/python3*/{site,dist}-packages; an
// empty folder prefix means `<package>/<file>`.
std::string find_in_python(const std::string& prefix, const std::string& package,
                           const std::string& folder, const std::string& file) {
  for (const std::string& python : entries(prefix + "/lib", "python3")) {
    for (const char* kind : {"site-packages", "dist-packages"}) {
      const std::string base = prefix + "/lib/" + python + "/" + kind + "/" + package;
      if (folder.empty()) {
        if (is_file(base + "/" + file)) return base + "/" + file;
        continue;
      }
      for (const std::string& sub : entries(base, folder)) {
        if (is_file(base + "/" + sub + "/" + file)) return base + "/" + sub + "/" + file;
      }
    }
  }
  return "";
}

// The Python environments a plugin's package may be installed in: the active virtual or conda
// environment, the project's .venv, the user's and the system's.
std::vector<std::string> python_prefixes() {
  std::vector<std::string> prefixes;
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (const char* v = std::getenv(var); v && *v) prefixes.push_back(v);
  }
  prefixes.push_back(std::string(PRISM_SOURCE_DIR) + "/.venv");
  if (const char* home = std::getenv("HOME"); home && *home) {
    prefixes.push_back(std::string(home) + "/.local");
  }
  prefixes.push_back("/usr/local");
  prefixes.push_back("/usr");
  return prefixes;
}

// Where each shortcut's vendor package puts its plugin.
struct KnownPlugin {
  const char* name;
  const char* package;  // the Python package folder
  const char* folder;   // a subfolder prefix, or ""
  const char* file;
  const char* pip;  // what to install
  bool accelerator;
};
constexpr KnownPlugin kKnown[] = {
    {"xla-cpu", "xla_plugins", "xla_cpu_pjrt", "xla_cpu_pjrt.so", "xla-cpu-pjrt", false},
    {"xla-cuda", "jax_plugins", "xla_cuda", "xla_cuda_plugin.so", "jax-cuda12-pjrt", true},
    {"tpu", "libtpu", "", "libtpu.so", "libtpu", true},
    {"neuron", "libneuronxla", "", "libneuronpjrt.so",
     "libneuronxla --extra-index-url=https://pip.repos.neuron.amazonaws.com", true},
    {"rocm", "jax_plugins", "xla_rocm", "xla_rocm_plugin.so", "jax-rocm7-pjrt", true},
    {"oneapi", "jax_plugins", "intel_extension_for_openxla", "pjrt_plugin_xpu.so",
     "intel-extension-for-openxla", true},
};

// The serialized CompileOptionsProto for a program split over `partitions` devices by the
// plugin's SPMD partitioner: executable_build_options (field 3) with num_replicas (4) = 1,
// num_partitions (5), use_spmd_partitioning (6) and, for Shardy, use_shardy_partitioner (19).
std::string mesh_compile_options(int64_t partitions, Partitioner partitioner) {
  PRISM_CHECK(partitions > 1 && partitions < 128, "pjrt: a mesh of {} devices", partitions);
  std::string build = {0x20, 0x01, 0x28, static_cast<char>(partitions), 0x30, 0x01};
  if (partitioner == Partitioner::shardy) build += std::string{'\x98', 0x01, 0x01};
  return std::string{0x1a, static_cast<char>(build.size())} + build;
}

// The partitioner the modules of meshes are written for: PRISM_PJRT_PARTITIONER=shardy (the
// default) or gspmd, for plugins older than Shardy.
Partitioner mesh_partitioner() {
  const char* env = std::getenv("PRISM_PJRT_PARTITIONER");
  const std::string want = env ? env : "";
  if (want.empty() || want == "shardy") return Partitioner::shardy;
  if (want == "gspmd") return Partitioner::gspmd;
  fail("pjrt: PRISM_PJRT_PARTITIONER must be shardy or gspmd, not '{}'", want);
}

// A compiled program on one device, or split over the devices of a mesh by the plugin.
class Program {
 public:
  // `devices`: the platform of each device the program runs on (one, or a mesh's); `outputs`:
  // each output's shape on a device.
  Program(std::vector<PjrtPlatform*> devices, const ir::Graph& graph, const CompileSpec& spec,
          std::vector<Shape> outputs, const ModuleSharding* sharding)
      : devices_(std::move(devices)),
        plugin_(devices_[0]->plugin()),
        api_(plugin_.api()),
        outputs_(std::move(outputs)) {
    // Each donated input lends its memory to the first output of its shape not yet given one.
    params_ = static_cast<int>(graph.parameters().size());
    std::vector<Shape> inputs;
    for (ValueId id = 0; id < graph.size(); ++id) {
      const ir::Node& n = graph.node(id);
      if (n.op != Op::input) continue;
      const int at = n.attr<ir::InputAttrs>().index;
      if (static_cast<int>(inputs.size()) <= at) inputs.resize(at + 1);
      inputs[at] = n.shape;
    }
    std::vector<bool> taken(graph.outputs().size(), false);
    for (int input : spec.donated_inputs) {
      if (input < 0 || input >= static_cast<int>(inputs.size())) continue;
      for (size_t k = 0; k < graph.outputs().size(); ++k) {
        if (taken[k] || !(graph.node(graph.outputs()[k]).shape == inputs[input])) continue;
        taken[k] = true;
        aliases_[params_ + input] = static_cast<int>(k);
        break;
      }
    }
    const std::string module =
        sharding ? to_stablehlo(graph, aliases_, *sharding) : to_stablehlo(graph, aliases_);
    const char* debug = std::getenv("PRISM_DEBUG");
    if (debug && std::atoi(debug) >= 2) fmt::print(stderr, "{}", module);
    auto program = PRISM_PJRT_ARGS(PJRT_Program);
    program.code = const_cast<char*>(module.data());
    program.code_size = module.size();
    program.format = "mlir";
    program.format_size = 4;
    const std::string options =
        sharding ? mesh_compile_options(sharding->mesh.devices(), sharding->partitioner)
                 : std::string(kCompileOptions, sizeof kCompileOptions);
    auto a = PRISM_PJRT_ARGS(PJRT_Client_Compile_Args);
    a.client = devices_[0]->client();
    a.program = &program;
    a.compile_options = options.data();
    a.compile_options_size = options.size();
    plugin_.check(api_.PJRT_Client_Compile(&a), "compiling the program");
    executable_ = a.executable;
    if (devices_.size() > 1) check_placement();
  }

  ~Program() {
    auto d = PRISM_PJRT_ARGS(PJRT_LoadedExecutable_Destroy_Args);
    d.executable = executable_;
    api_.PJRT_LoadedExecutable_Destroy(&d);
  }

  // Per device: the parameters' and inputs' buffers; returns each device's outputs.
  std::vector<std::vector<Buffer>> run(std::span<const std::vector<Buffer>> params,
                                       std::span<const std::vector<Buffer>> inputs) {
    const size_t n = devices_.size();
    std::vector<std::vector<PJRT_Buffer*>> args(n), results(n);
    std::vector<PJRT_Buffer* const*> argument_lists(n);
    std::vector<PJRT_Buffer**> output_lists(n);
    std::vector<PJRT_Event*> done(n, nullptr);
    for (size_t k = 0; k < n; ++k) {
      for (const Buffer& b : params[k]) args[k].push_back(devices_[k]->buffer_of(b));
      for (const Buffer& b : inputs[k]) args[k].push_back(devices_[k]->buffer_of(b));
      results[k].assign(outputs_.size(), nullptr);
      argument_lists[k] = args[k].data();
      output_lists[k] = results[k].data();
    }
    auto options = PRISM_PJRT_ARGS(PJRT_ExecuteOptions);
    auto a = PRISM_PJRT_ARGS(PJRT_LoadedExecutable_Execute_Args);
    a.executable = executable_;
    a.options = &options;
    a.argument_lists = argument_lists.data();
    a.num_devices = n;
    a.num_args = args[0].size();
    a.output_lists = output_lists.data();
    a.device_complete_events = done.data();
    plugin_.check(api_.PJRT_LoadedExecutable_Execute(&a), "running the program");
    std::vector<std::vector<Buffer>> out(n);
    for (size_t k = 0; k < n; ++k) {
      out[k].resize(outputs_.size());
      // A donated input's memory now holds its output: its Buffer's memory takes the new
      // handle (the donated one is spent), so that the caller sees the input updated in place.
      for (auto [arg, j] : aliases_) {
        const Buffer& donated = inputs[k][arg - params_];
        auto* m = static_cast<PjrtMemory*>(donated.memory());
        auto d = PRISM_PJRT_ARGS(PJRT_Buffer_Destroy_Args);
        d.buffer = m->buffer;
        api_.PJRT_Buffer_Destroy(&d);
        m->buffer = results[k][j];
        out[k][j] = Buffer(outputs_[j], donated.shared_memory(), devices_[k]);
      }
      for (size_t j = 0; j < outputs_.size(); ++j) {
        if (!out[k][j].valid()) out[k][j] = devices_[k]->wrap(outputs_[j], results[k][j]);
      }
    }
    for (size_t k = 0; k < n; ++k) plugin_.await(done[k], "running the program");
    return out;
  }

 private:
  // The plugin runs partition k on the k-th of the executable's devices: they must be the
  // mesh's, in order, for each device's shards to be where the program reads them.
  void check_placement() {
    auto d = PRISM_PJRT_ARGS(PJRT_LoadedExecutable_AddressableDevices_Args);
    d.executable = executable_;
    plugin_.check(api_.PJRT_LoadedExecutable_AddressableDevices(&d), "listing its devices");
    PRISM_CHECK(d.num_addressable_devices == devices_.size(),
                "{}: the program runs on {} devices, the mesh has {}", plugin_.name(),
                d.num_addressable_devices, devices_.size());
    for (size_t k = 0; k < devices_.size(); ++k) {
      PRISM_CHECK(d.addressable_devices[k] == devices_[k]->device(),
                  "{}: the plugin placed partition {} on another device than the mesh's {}",
                  plugin_.name(), k, k);
    }
  }

  std::vector<PjrtPlatform*> devices_;
  const Plugin& plugin_;
  const PJRT_Api& api_;
  PJRT_LoadedExecutable* executable_ = nullptr;
  std::vector<Shape> outputs_;
  int params_ = 0;
  std::map<int, int> aliases_;  // argument -> output whose memory it is
};

class PjrtExecutable : public ExecutableImpl {
 public:
  PjrtExecutable(PjrtPlatform& platform, const ir::Graph& graph, const CompileSpec& spec)
      : program_({&platform}, graph, spec, output_shapes(graph), nullptr) {}

  std::vector<Buffer> call(std::span<const Buffer> params,
                           std::span<const Buffer> inputs) override {
    std::vector<std::vector<Buffer>> p{{params.begin(), params.end()}};
    std::vector<std::vector<Buffer>> i{{inputs.begin(), inputs.end()}};
    return std::move(program_.run(p, i)[0]);
  }

 private:
  static std::vector<Shape> output_shapes(const ir::Graph& graph) {
    std::vector<Shape> shapes;
    for (ValueId out : graph.outputs()) shapes.push_back(graph.node(out).shape);
    return shapes;
  }
  Program program_;
};

class PjrtMeshExecutable : public MeshExecutableImpl {
 public:
  PjrtMeshExecutable(std::vector<PjrtPlatform*> devices, const ir::Graph& graph,
                     const MeshSpec& spec)
      : program_(std::move(devices), graph, CompileSpec{spec.donated_inputs},
                 local_outputs(graph, spec), sharding(spec).get()) {}

  std::vector<std::vector<Buffer>> call(std::span<const std::vector<Buffer>> params,
                                        std::span<const std::vector<Buffer>> inputs) override {
    return program_.run(params, inputs);
  }

 private:
  static std::vector<Shape> local_outputs(const ir::Graph& graph, const MeshSpec& spec) {
    std::vector<Shape> shapes;
    for (size_t k = 0; k < graph.outputs().size(); ++k) {
      shapes.push_back(
          local_shape(graph.node(graph.outputs()[k]).shape, spec.outputs[k], spec.mesh));
    }
    return shapes;
  }
  static std::unique_ptr<ModuleSharding> sharding(const MeshSpec& spec) {
    auto s = std::make_unique<ModuleSharding>();
    s->mesh = spec.mesh;
    s->partitioner = mesh_partitioner();
    s->arguments = spec.parameters;
    s->arguments.insert(s->arguments.end(), spec.inputs.begin(), spec.inputs.end());
    s->results = spec.outputs;
    return s;
  }
  Program program_;
};

}  // namespace

PjrtMemory::~PjrtMemory() {
  if (!buffer) return;
  auto d = PRISM_PJRT_ARGS(PJRT_Buffer_Destroy_Args);
  d.buffer = buffer;
  plugin->api().PJRT_Buffer_Destroy(&d);
}

PjrtPlatform::PjrtPlatform(std::string name, const std::string& plugin_path)
    : name_(std::move(name)), plugin_(std::make_shared<Plugin>(plugin_path, name_)) {
  const PJRT_Api& api = plugin_->api();
  auto create = PRISM_PJRT_ARGS(PJRT_Client_Create_Args);
  // The XLA CPU plugin's devices, for meshes: as many as prism's CPU offers (one per core,
  // or PRISM_CPU_DEVICES), but at least four; one program runs on the first.
  auto count = PRISM_PJRT_ARGS(PJRT_NamedValue);
  count.name = "cpu_device_count";
  count.name_size = std::strlen(count.name);
  count.type = PJRT_NamedValue_kInt64;
  const int64_t asked = devices_asked("PRISM_CPU_DEVICES");
  count.int64_value = std::max<int64_t>(
      4, asked ? asked : static_cast<int64_t>(std::thread::hardware_concurrency()));
  count.value_size = 1;
  if (name_ == "xla-cpu") {
    create.create_options = &count;
    create.num_options = 1;
  }
  plugin_->check(api.PJRT_Client_Create(&create), "creating a client");
  client_ = create.client;
  try {  // the destructor does not run for a constructor that throws: destroy the client here
    auto devices = PRISM_PJRT_ARGS(PJRT_Client_AddressableDevices_Args);
    devices.client = client_;
    plugin_->check(api.PJRT_Client_AddressableDevices(&devices), "listing devices");
    PRISM_CHECK(devices.num_addressable_devices > 0, "{}: the plugin {} has no device", name_,
                plugin_->path());
    all_devices_.assign(devices.addressable_devices,
                        devices.addressable_devices + devices.num_addressable_devices);
    device_ = all_devices_[0];
    auto description = PRISM_PJRT_ARGS(PJRT_Device_GetDescription_Args);
    description.device = device_;
    plugin_->check(api.PJRT_Device_GetDescription(&description), "describing the device");
    auto kind = PRISM_PJRT_ARGS(PJRT_DeviceDescription_Kind_Args);
    kind.device_description = description.device_description;
    plugin_->check(api.PJRT_DeviceDescription_Kind(&kind), "describing the device");
    device_kind_.assign(kind.device_kind, kind.device_kind_size);
  } catch (...) {
    destroy_client();
    throw;
  }
}

PjrtPlatform::PjrtPlatform(const PjrtPlatform& parent, PJRT_Device* device)
    : name_(parent.name_),
      plugin_(parent.plugin_),
      client_(parent.client_),
      owns_client_(false),
      device_(device),
      all_devices_{device},
      device_kind_(parent.device_kind_) {}

PjrtPlatform::~PjrtPlatform() {
  if (owns_client_) destroy_client();
}

void PjrtPlatform::destroy_client() {
  auto d = PRISM_PJRT_ARGS(PJRT_Client_Destroy_Args);
  d.client = client_;
  plugin_->api().PJRT_Client_Destroy(&d);
}

std::vector<DeviceInfo> PjrtPlatform::devices() const {
  DeviceInfo d;
  d.name = fmt::format("{} (PJRT C API {}.{}, {})", device_kind_, plugin_->major(),
                       plugin_->minor(), plugin_->path());
  // The memory a device may use, where the plugin says (the CPU plugin does not).
  const PJRT_Api& api = plugin_->api();
  if (api.PJRT_Device_MemoryStats) {
    auto stats = PRISM_PJRT_ARGS(PJRT_Device_MemoryStats_Args);
    stats.device = device_;
    if (plugin_->succeeded(api.PJRT_Device_MemoryStats(&stats)) && stats.bytes_limit_is_set) {
      d.memory_bytes = stats.bytes_limit;
    }
  }
  return {d};
}

PJRT_Buffer* PjrtPlatform::buffer_of(const Buffer& b) const {
  auto* m = dynamic_cast<PjrtMemory*>(b.memory());
  PRISM_CHECK(m != nullptr && m->plugin == plugin_.get(), "{}: a buffer of platform {} was passed",
              name_, b.valid() ? std::string(b.platform().name()) : "none");
  return m->buffer;
}

Buffer PjrtPlatform::wrap(const Shape& shape, PJRT_Buffer* buffer) {
  auto m = std::make_shared<PjrtMemory>();
  m->plugin = plugin_.get();
  m->buffer = buffer;
  return Buffer(shape, std::move(m), this);
}

Buffer PjrtPlatform::upload(const HostBuffer& host) {
  const Shape& s = host.shape();
  std::vector<int64_t> dims;
  for (int a = 0; a < s.rank(); ++a) dims.push_back(s.size(a));
  auto a = PRISM_PJRT_ARGS(PJRT_Client_BufferFromHostBuffer_Args);
  a.client = client_;
  a.data = host.data();
  a.type = buffer_type(s.dtype());
  a.dims = dims.data();
  a.num_dims = dims.size();
  a.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  a.device = device_;
  plugin_->check(plugin_->api().PJRT_Client_BufferFromHostBuffer(&a), "uploading a buffer");
  Buffer b = wrap(s, a.buffer);
  plugin_->await(a.done_with_host_buffer, "uploading a buffer");
  return b;
}

Buffer PjrtPlatform::allocate(const Shape& shape) { return upload(HostBuffer(shape)); }

void PjrtPlatform::write(Buffer&, size_t, std::span<const std::byte>) {
  fail("{}: buffers cannot be written after they are made (upload them whole)", name_);
}

HostBuffer PjrtPlatform::download(const Buffer& buffer) {
  HostBuffer host(buffer.shape());
  auto a = PRISM_PJRT_ARGS(PJRT_Buffer_ToHostBuffer_Args);
  a.src = buffer_of(buffer);
  a.dst = host.bytes().data();
  a.dst_size = host.bytes().size();
  plugin_->check(plugin_->api().PJRT_Buffer_ToHostBuffer(&a), "downloading a buffer");
  plugin_->await(a.event, "downloading a buffer");
  return host;
}

std::vector<Platform*> PjrtPlatform::mesh_devices(const Mesh& mesh) {
  const int64_t n = mesh.devices();
  PRISM_CHECK(n <= mesh_capacity(), "{}: the mesh {} needs {} devices, the plugin has {}", name_,
              mesh.str(), n, mesh_capacity());
  if (n == 1) return {this};
  auto& views = meshes_[n];
  if (views.empty()) {
    for (int64_t k = 0; k < n; ++k) {
      views.push_back(std::unique_ptr<PjrtPlatform>(new PjrtPlatform(*this, all_devices_[k])));
    }
  }
  std::vector<Platform*> out;
  for (auto& v : views) out.push_back(v.get());
  return out;
}

std::unique_ptr<MeshExecutableImpl> PjrtPlatform::compile_for_mesh(const ir::Graph& graph,
                                                                   const MeshSpec& spec) {
  std::vector<PjrtPlatform*> devices;
  for (Platform* p : mesh_devices(spec.mesh)) devices.push_back(static_cast<PjrtPlatform*>(p));
  return std::make_unique<PjrtMeshExecutable>(std::move(devices), graph, spec);
}

// Every composite runs through its decomposition, which the plugin's compiler fuses.
bool PjrtPlatform::supports(const ir::Node&) const { return false; }

std::unique_ptr<ExecutableImpl> PjrtPlatform::compile(const ir::Graph& graph,
                                                      const CompileSpec& spec) {
  return std::make_unique<PjrtExecutable>(*this, graph, spec);
}

PluginLocation locate_plugin(const std::string& name) {
  if (name == "pjrt") {
    const char* env = std::getenv("PRISM_PJRT_PLUGIN");
    if (!env || !*env) return {"", "PRISM_PJRT_PLUGIN is not set (the path of a PJRT plugin)"};
    if (!is_file(env)) return {"", fmt::format("PRISM_PJRT_PLUGIN={}: no such file", env)};
    return {env, ""};
  }
  for (const KnownPlugin& k : kKnown) {
    if (name != k.name) continue;
    if (name == "tpu") {  // libtpu's own override
      if (const char* v = std::getenv("TPU_LIBRARY_PATH"); v && *v && is_file(v)) return {v, ""};
    }
    const std::vector<std::string> prefixes = python_prefixes();
    for (const std::string& prefix : prefixes) {
      std::string path = find_in_python(prefix, k.package, k.folder, k.file);
      if (!path.empty()) return {path, ""};
    }
    return {"", fmt::format("no {} plugin: pip install {} (looked in {})", k.name, k.pip,
                            fmt::join(prefixes, ", "))};
  }
  return {"", fmt::format("{} is not a PJRT platform prism knows", name)};
}

bool is_accelerator(const std::string& name) {
  for (const KnownPlugin& k : kKnown) {
    if (name == k.name) return k.accelerator;
  }
  return false;
}

PlatformStatus probe(const std::string& name) {
  PluginLocation where = locate_plugin(name);
  // Accelerators count as GPUs for `auto`, which then prefers them to any CPU.
  return PlatformStatus{name, true, !where.path.empty(), where.reason, is_accelerator(name)};
}

std::unique_ptr<Platform> make_platform(const std::string& name) {
  PluginLocation where = locate_plugin(name);
  PRISM_CHECK(!where.path.empty(), "{}: {}", name, where.reason);
  return std::make_unique<PjrtPlatform>(name, where.path);
}

}  // namespace prism::pjrt
