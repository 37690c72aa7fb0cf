// The PJRT platform: a vendor's compiler and runtime behind the PJRT C API (a plugin loaded at
// run time), given prism graphs as StableHLO (stablehlo.h). Buffers are PJRT buffers on the
// plugin's first device; they are immutable, so loads stage tensors whole (writes_in_place).
// The plugin's compiler does fusion and scheduling; prism only prints and runs.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "prism/backends/pjrt/pjrt_api.h"
#include "prism/runtime/platform.h"

namespace prism::pjrt {

struct PjrtMemory : DeviceMemory {
  const Plugin* plugin = nullptr;
  PJRT_Buffer* buffer = nullptr;
  ~PjrtMemory() override;
};

class PjrtPlatform : public Platform {
 public:
  // `name`: the platform's name ("xla-cpu", "pjrt"); `plugin_path`: the plugin's file.
  PjrtPlatform(std::string name, const std::string& plugin_path);
  ~PjrtPlatform() override;

  std::string_view name() const override { return name_; }
  std::vector<DeviceInfo> devices() const override;
  Buffer allocate(const Shape& shape) override;
  Buffer upload(const HostBuffer& host) override;
  void write(Buffer& buffer, size_t offset, std::span<const std::byte> bytes) override;
  bool writes_in_place() const override { return false; }
  HostBuffer download(const Buffer& buffer) override;
  bool supports(const ir::Node& node) const override;
  std::unique_ptr<ExecutableImpl> compile(const ir::Graph& graph, const CompileSpec& spec) override;

  // A mesh is the plugin's devices; the plugin's SPMD partitioner splits the program, given
  // the shardings of its arguments and results.
  int64_t mesh_capacity() const override { return static_cast<int64_t>(all_devices_.size()); }
  std::vector<Platform*> mesh_devices(const Mesh& mesh) override;
  std::unique_ptr<MeshExecutableImpl> compile_for_mesh(const ir::Graph& graph,
                                                       const MeshSpec& spec) override;

  const Plugin& plugin() const { return *plugin_; }
  PJRT_Device* device() const { return device_; }
  PJRT_Client* client() const { return client_; }
  // The PJRT buffer of `b`, which must live on this platform.
  PJRT_Buffer* buffer_of(const Buffer& b) const;
  Buffer wrap(const Shape& shape, PJRT_Buffer* buffer);

 private:
  // Device `device` of `parent`'s client, for a mesh: shares its plugin and client.
  PjrtPlatform(const PjrtPlatform& parent, PJRT_Device* device);
  void destroy_client();

  std::string name_;
  std::shared_ptr<Plugin> plugin_;
  PJRT_Client* client_ = nullptr;
  bool owns_client_ = true;
  PJRT_Device* device_ = nullptr;
  std::vector<PJRT_Device*> all_devices_;
  std::string device_kind_;
  std::map<int64_t, std::vector<std::unique_ptr<PjrtPlatform>>> meshes_;  // by device count
};

// Where the plugin of platform `name` is, or why there is none: `pjrt` reads
// PRISM_PJRT_PLUGIN; the shortcuts look for their vendor package's plugin in the Python
// environments where pip puts it ($VIRTUAL_ENV, $CONDA_PREFIX, the project's .venv, ~/.local,
// /usr/local, /usr): `xla-cpu` (xla-cpu-pjrt), `xla-cuda` (jax's CUDA plugin), `tpu` (libtpu,
// or TPU_LIBRARY_PATH).
struct PluginLocation {
  std::string path;    // empty when not found
  std::string reason;  // why not, and where it looked
};
PluginLocation locate_plugin(const std::string& name);

// For the platform registry (prism/backends/registry.cpp): available when the plugin's file is
// there (it is loaded when the platform is first used).
PlatformStatus probe(const std::string& name);
std::unique_ptr<Platform> make_platform(const std::string& name);

}  // namespace prism::pjrt
