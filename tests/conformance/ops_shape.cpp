#include "tests/conformance/node_context.h"

namespace prism::conformance {

void register_shape_ops(OpTable& t) {}

}  // namespace prism::conformance
