#include "prism/runtime/platform.h"

#include "prism/core/error.h"

namespace prism {

HostBuffer Buffer::to_host() const {
  PRISM_CHECK(valid(), "buffer: empty buffer has no data");
  return platform_->download(*this);
}

}  // namespace prism
