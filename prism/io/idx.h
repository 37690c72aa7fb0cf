// The MNIST idx format: a big-endian header (magic 0x0000TTNN: element type TT, NN dims, then
// NN 32-bit sizes) followed by the elements. Unsigned bytes (0x08) is what MNIST ships.
#pragma once

#include <string_view>

#include "prism/core/host_buffer.h"

namespace prism::io {

// Reads an idx file of unsigned bytes from any VFS URI. The dims get the given tags (e.g.
// {"b", "h", "w"}); throws, naming the file, on a bad magic, type, size or rank.
HostBuffer read_idx_u8(std::string_view uri, std::initializer_list<Tag> tags);

}  // namespace prism::io
