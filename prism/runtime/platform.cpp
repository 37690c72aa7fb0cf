#include "prism/runtime/platform.h"

#include "prism/core/error.h"

namespace prism {

HostBuffer Buffer::to_host() const {
  PRISM_CHECK(valid(), "buffer: empty buffer has no data");
  return platform_->download(*this);
}

}  // namespace prism

namespace prism {

std::vector<Platform*> Platform::mesh_devices(const Mesh& mesh) {
  PRISM_CHECK(mesh.devices() <= mesh_capacity(),
              "{}: the mesh {} needs {} devices, the platform offers {}", name(), mesh.str(),
              mesh.devices(), mesh_capacity());
  return {this};
}

}  // namespace prism
