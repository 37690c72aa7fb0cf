// Streams a checkpoint's tensors into device buffers for the parameters an executable needs.
//
//   Executable exe = compile(platform, model_fn, input_shapes);
//   io::Weights w = io::load(io::Store::open(uri), exe.parameters(), platform);
//   exe.call(w, inputs);
//
// Tensors are read in chunks by `parallelism` workers, each with one staging chunk, converted
// when the file's dtype differs from the parameter's (bf16 -> f32, ...), and written to the
// device. On the CPU, a local file's tensors are used in place (zero copy) when their dtype
// matches and they are aligned. With zero_copy off they are copied, unless the copy would not
// fit in the host memory available: then they are used in place all the same, and the report
// says so, rather than the process being killed for want of memory halfway through a load.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "prism/io/store.h"
#include "prism/runtime/compile.h"
#include "prism/runtime/platform.h"
#include "prism/runtime/sharded.h"

namespace prism::io {

struct LoadOptions {
  int parallelism = 8;                // chunks read at once
  uint64_t chunk_size = 16ull << 20;  // bytes per staging chunk
  bool progress = true;               // a progress bar, when stderr is a terminal
  bool report = true;                 // "loaded N tensors, X GB in Y s (Z GB/s)" on stderr
  bool zero_copy = true;              // adopt mapped files where the platform can
  // With zero_copy off: the most bytes of tensors that could be used in place to copy into
  // host memory, beyond which they are used in place anyway. 0: 90 % of the memory available
  // when the load starts (MemAvailable).
  uint64_t copy_limit = 0;
  // Set while a load runs: it stops reading at its next chunk and throws "load: cancelled".
  const std::atomic<bool>* cancel = nullptr;
};

struct LoadStats {
  size_t tensors = 0;
  size_t zero_copy = 0;       // tensors used in place
  uint64_t bytes = 0;         // bytes of the loaded buffers
  uint64_t mapped_bytes = 0;  // of which used in place (nothing read yet)
  double seconds = 0;
  // The report line: "loaded N tensors, X GB in Y s (Z GB/s)", the rate over the bytes
  // copied; tensors used in place are counted apart, as they cost nothing until read.
  std::string line() const;
};

using Weights = std::map<std::string, Buffer, std::less<>>;

// Loads every parameter by name from `store`. Throws, naming the tensor, when one is missing
// (with the closest names), has other sizes than the parameter, or has a dtype that cannot be
// converted.
Weights load(const Store& store, std::span<const Executable::Parameter> parameters,
             Platform& platform, const LoadOptions& options = {}, LoadStats* stats = nullptr);

// The same for the devices of a mesh (ShardedExecutable::devices()): each device gets only its
// shard of each split parameter, streamed from the store chunk by chunk (each chunk read once
// and cut into the devices' shards; no device ever holds a whole split tensor), and its own
// copy of each whole one. Returns each device's weights. `devices` are the mesh's from
// `first_device` on (ShardedExecutable::first_device(): in a run of several processes, the
// ones this process holds); only the rows their shards hold are read.
std::vector<Weights> load_sharded(const Store& store,
                                  std::span<const ShardedExecutable::Parameter> parameters,
                                  const Mesh& mesh, std::span<Platform* const> devices,
                                  const LoadOptions& options = {}, LoadStats* stats = nullptr,
                                  int64_t first_device = 0);

}  // namespace prism::io
