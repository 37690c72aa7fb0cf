#include "prism/io/idx.h"

#include <vector>

#include "prism/core/error.h"
#include "prism/io/vfs.h"

namespace prism::io {

HostBuffer read_idx_u8(std::string_view uri, std::initializer_list<Tag> tags) {
  std::shared_ptr<File> file = open(uri);
  uint64_t size = file->size();
  std::vector<std::byte> header(4);
  PRISM_CHECK(size >= 4, "{}: not an idx file ({} bytes)", uri, size);
  file->read_at(0, header);
  auto byte = [&](int i) { return static_cast<uint8_t>(header[i]); };
  PRISM_CHECK(byte(0) == 0 && byte(1) == 0, "{}: not an idx file (bad magic)", uri);
  PRISM_CHECK(byte(2) == 0x08, "{}: idx element type 0x{:02x}, expected unsigned bytes (0x08)", uri,
              byte(2));
  size_t rank = byte(3);
  PRISM_CHECK(rank == tags.size(), "{}: idx file has {} dimensions, expected {}", uri, rank,
              tags.size());
  PRISM_CHECK(size >= 4 + 4 * rank, "{}: idx header truncated", uri);
  std::vector<std::byte> dims_raw(4 * rank);
  file->read_at(4, dims_raw);
  std::vector<Dim> dims;
  uint64_t count = 1;
  auto tag = tags.begin();
  for (size_t i = 0; i < rank; ++i) {
    uint32_t d = 0;
    for (int k = 0; k < 4; ++k) d = d << 8 | static_cast<uint8_t>(dims_raw[4 * i + k]);
    dims.push_back({*tag++, d});
    count *= d;
  }
  uint64_t data = 4 + 4 * rank;
  PRISM_CHECK(size == data + count,
              "{}: idx file is {} bytes but its header describes {} bytes of data after {}", uri,
              size, count, data);
  HostBuffer out(Shape(DType::u8, dims, "idx"));
  file->read_at(data, out.bytes());
  return out;
}

}  // namespace prism::io
