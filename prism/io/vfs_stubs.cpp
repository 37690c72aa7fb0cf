// Placeholders until the network schemes land: they say so instead of failing to link.
#include "prism/core/error.h"
#include "prism/io/vfs_schemes.h"

namespace prism::io {
FileSystem& s3_filesystem() { fail("s3:// is not implemented yet"); }
}  // namespace prism::io
