#include "tests/conformance/node_context.h"

namespace prism::conformance {

void register_reduce_ops(OpTable& t) {}

}  // namespace prism::conformance
