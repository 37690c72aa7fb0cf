#include "tests/conformance/node_context.h"

namespace prism::conformance {

void register_index_ops(OpTable& t) {}

}  // namespace prism::conformance
