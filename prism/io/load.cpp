#include "prism/io/load.h"

#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>

#include "prism/core/error.h"
#include "prism/quant/dequantize.h"
#include "prism/quant/quantize.h"

namespace prism::io {
namespace {

// A piece of one tensor's load: bytes of the file for a tensor copied as stored, rows for one
// decoded as it loads (StoredTensor::decoded).
struct Chunk {
  size_t tensor;
  uint64_t first;  // within the tensor: the first byte, or the first row
  uint64_t size;   // bytes, or rows
};

// The block format a parameter of bytes (u8) takes a decoded tensor in, a model keeping the
// weights quantized (CausalLM::set_quantized_weights): round_trip's, quantized as it loads,
// else the file's blocks, copied as they are. Nothing for other parameters.
std::optional<quant::GgmlType> kept_blocks(const StoredTensor& t, DType want) {
  if (want != DType::u8) return std::nullopt;
  return t.round_trip ? t.round_trip : t.blocks;
}

// Whether a parameter of dtype `want` takes `t`'s bytes as they are stored: blocks kept as the
// file has them (the others are decoded row by row as they load).
bool verbatim(const StoredTensor& t, DType want) {
  return kept_blocks(t, want) && t.blocks_as_stored();
}

// Bytes of one row of `t` loaded for a parameter of dtype `want`.
uint64_t loaded_row_bytes(const StoredTensor& t, DType want) {
  if (std::optional<quant::GgmlType> kept = kept_blocks(t, want)) {
    const quant::GgmlTypeInfo& type = quant::info(*kept);
    return t.row_elements() / type.block_elements * type.block_bytes;
  }
  return t.row_elements() * size_of(want);
}

// Row `src` of `t` as the model's values in f32, into `out` (row_elements() of them): its
// blocks dequantized or its elements converted, its columns put in order and what the file
// holds of each value undone (StoredTensor::column_order, stored_as).
void decode_row(const StoredTensor& t, std::span<const std::byte> src, std::span<float> out) {
  thread_local std::vector<float> stored;
  const int64_t n = t.row_elements();
  std::span<float> values = out;
  if (!t.column_order.empty()) {
    stored.resize(n);
    values = stored;
  }
  if (t.blocks) {
    quant::dequantize(*t.blocks, src, values);
  } else {
    convert_elements(*to_core_dtype(t.info.dtype), src.data(), DType::f32,
                     reinterpret_cast<std::byte*>(values.data()), n);
  }
  if (!t.column_order.empty()) {
    for (int64_t c = 0; c < n; ++c) out[c] = stored[t.column_order[c]];
  }
  switch (t.stored_as) {
    case StoredTensor::Stored::as_is:
      break;
    case StoredTensor::Stored::plus_one:
      for (float& v : out) v -= 1.0f;
      break;
    case StoredTensor::Stored::negated_exp:
      for (float& v : out) v = static_cast<float>(std::log(-static_cast<double>(v)));
      break;
  }
}

// Rows [first, first + count) of a tensor decoded as it loads, as `want` elements into `out`
// (count rows of row_elements() each). The stored rows they come from are read as one range:
// a row order moves rows only within a head, so the range is barely larger than the rows.
// Returns the bytes read.
uint64_t read_decoded_rows(const StoredTensor& t, int64_t first, int64_t count, DType want,
                           std::span<std::byte> out) {
  int64_t lo = t.stored_row(first), hi = lo;
  for (int64_t r = first; r < first + count; ++r) {
    lo = std::min(lo, t.stored_row(r));
    hi = std::max(hi, t.stored_row(r));
  }
  const uint64_t row_bytes = t.stored_row_bytes();
  thread_local std::vector<std::byte> staging;
  thread_local std::vector<float> decoded;
  thread_local std::vector<std::byte> round_trip_blocks;
  staging.resize((hi - lo + 1) * row_bytes);
  t.file->read_at(t.offset + lo * row_bytes, staging);
  const int64_t n = t.row_elements();
  const size_t out_row = loaded_row_bytes(t, want);
  const std::optional<quant::GgmlType> kept = kept_blocks(t, want);
  PRISM_CHECK(out.size() == count * out_row, "load: {} bytes for {} rows of {}", out.size(), count,
              t.info.name);
  for (int64_t r = first; r < first + count; ++r) {
    const std::span<const std::byte> src(staging.data() + (t.stored_row(r) - lo) * row_bytes,
                                         row_bytes);
    std::byte* dst = out.data() + (r - first) * out_row;
    if (kept && !t.round_trip) {  // the file's blocks, kept (never rearranged: checked_dtype)
      std::memcpy(dst, src.data(), row_bytes);
    } else if (kept) {  // quantized, kept
      decoded.resize(n);
      decode_row(t, src, decoded);
      quant::quantize(*kept, decoded, std::span(dst, out_row));
    } else if (t.round_trip) {  // to f32, through the type's blocks and back, then to `want`
      decoded.resize(n);
      decode_row(t, src, decoded);
      const quant::GgmlTypeInfo& type = quant::info(*t.round_trip);
      round_trip_blocks.resize(n / type.block_elements * type.block_bytes);
      quant::quantize(*t.round_trip, decoded, round_trip_blocks);
      quant::dequantize(*t.round_trip, round_trip_blocks, decoded);
      convert_elements(DType::f32, reinterpret_cast<const std::byte*>(decoded.data()), want, dst,
                       n);
    } else if (!t.blocks && !t.rearranged()) {
      convert_elements(*to_core_dtype(t.info.dtype), src.data(), want, dst, n);
    } else if (want == DType::f32) {
      decode_row(t, src, std::span(reinterpret_cast<float*>(dst), n));
    } else {
      decoded.resize(n);
      decode_row(t, src, decoded);
      convert_elements(DType::f32, reinterpret_cast<const std::byte*>(decoded.data()), want, dst,
                       n);
    }
  }
  return staging.size();
}

class Progress {
 public:
  Progress(bool enabled, uint64_t total) : enabled_(enabled && isatty(2)), total_(total) {}
  ~Progress() { done(); }
  // Clears the bar, so that what is printed next starts its own line.
  void done() {
    if (enabled_ && drawn_) std::fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }
  void add(uint64_t bytes) {
    uint64_t done = done_ += bytes;
    if (!enabled_) return;
    auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    if (done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    drawn_ = true;
    int width = 30, filled = total_ ? static_cast<int>(width * done / total_) : width;
    std::fprintf(stderr, "\rloading [%s%s] %3d%% %s / %s", std::string(filled, '=').c_str(),
                 std::string(width - filled, ' ').c_str(),
                 total_ ? static_cast<int>(100 * done / total_) : 100, format_bytes(done).c_str(),
                 format_bytes(total_).c_str());
  }

 private:
  bool enabled_;
  uint64_t total_;
  std::atomic<uint64_t> done_{0};
  std::mutex mutex_;
  std::chrono::steady_clock::time_point last_{};
  bool drawn_ = false;
};

// The host memory available now: /proc/meminfo's MemAvailable, else the free pages.
uint64_t available_memory() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) {
      found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    }
    std::fclose(f);
    if (found) return kib * 1024;
  }
  return static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
}

}  // namespace

std::string LoadStats::line() const {
  std::string line =
      fmt::format("loaded {} tensors, {:.2f} GB in {:.2f} s", tensors, bytes / 1e9, seconds);
  const uint64_t copied = bytes - mapped_bytes;
  if (zero_copy == tensors && tensors > 0) return line + " (mapped in place, no copy)";
  line += fmt::format(" ({:.2f} GB/s", seconds > 0 ? copied / 1e9 / seconds : 0.0);
  if (zero_copy > 0) line += fmt::format("; {} tensors mapped in place, no copy", zero_copy);
  return line + ")";
}

namespace {

// The dtype of stored tensor `st`, checked to be one prism loads and to have the sizes the
// parameter `name` of `shape` expects; throws naming it otherwise.
std::optional<DType> checked_dtype(const Store& store, const StoredTensor& st,
                                   const std::string& parameter, const Shape& shape) {
  std::optional<DType> file_dtype = to_core_dtype(st.info.dtype);
  if (!file_dtype || (st.blocks && !quant::can_dequantize(*st.blocks))) {
    fail("load: tensor \"{}\" in {} is {}, which prism cannot load{}", parameter, store.uri(),
         st.type_name(), st.blocks ? " (no dequantization for it yet)" : "");
  }
  std::vector<int64_t> sizes = st.info.shape;  // as the parameter holds it
  if (std::optional<quant::GgmlType> kept = kept_blocks(st, shape.dtype())) {
    if (!st.round_trip && st.rearranged()) {
      fail(
          "load: tensor \"{}\" in {} is {} blocks of other columns or values than the model's, "
          "which cannot be kept as they are",
          parameter, store.uri(), st.type_name());
    }
    const quant::GgmlTypeInfo& type = quant::info(*kept);
    if (sizes.size() == 2 && sizes[1] % type.block_elements == 0) {
      sizes[1] = sizes[1] / type.block_elements * type.block_bytes;
    }
  }
  if (sizes != shape.sizes()) {
    fail("load: tensor \"{}\" in {} is {}{} but the model expects {}", parameter, store.uri(),
         st.type_name(), st.info.shape_str(), shape.str());
  }
  return file_dtype;
}

// Parameters that name blocks of rows of one stored tensor ("w[0:8]", "w[8:16]") must read
// it whole, each row once: a block left out or read twice means the model's sizes disagree
// with the checkpoint, which the blocks alone would not show.
void check_row_blocks(const Store& store, const std::vector<std::string>& names) {
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> blocks;
  for (const std::string& name : names) {
    const size_t open = name.rfind('[');
    if (open == std::string::npos || name.back() != ']') continue;
    const StoredTensor t = store.rows(name);  // checks the name's range
    // The first row, as the name says it: a decoded tensor's rows keep its offset.
    int64_t first = 0;
    std::from_chars(name.data() + open + 1, name.data() + name.size(), first);
    blocks[name.substr(0, open)].emplace_back(first, first + t.info.shape[0]);
  }
  for (auto& [name, b] : blocks) {
    std::sort(b.begin(), b.end());
    const int64_t rows = store.at(name).info.shape[0];
    int64_t next = 0;
    for (const auto& [first, end] : b) {
      PRISM_CHECK(first == next,
                  "load: tensor \"{}\" in {} has {} rows, but the model reads "
                  "rows {}..{} next after row {}: its sizes disagree with the checkpoint",
                  name, store.uri(), rows, first, end, next);
      next = end;
    }
    PRISM_CHECK(next == rows,
                "load: tensor \"{}\" in {} has {} rows, but the model reads {}: its sizes "
                "disagree with the checkpoint",
                name, store.uri(), rows, next);
  }
}

Weights load_whole(const Store& store, std::span<const Executable::Parameter> parameters,
                   Platform& platform, const LoadOptions& options, LoadStats* stats_out);

}  // namespace

Weights load(const Store& store, std::span<const Executable::Parameter> parameters,
             Platform& platform, const LoadOptions& options, LoadStats* stats_out) {
  std::vector<std::string> names;
  for (const Executable::Parameter& p : parameters) names.push_back(p.name);
  check_row_blocks(store, names);
  return load_whole(store, parameters, platform, options, stats_out);
}

namespace {

Weights load_whole(const Store& store, std::span<const Executable::Parameter> parameters,
                   Platform& platform, const LoadOptions& options, LoadStats* stats_out) {
  auto start = std::chrono::steady_clock::now();
  PRISM_CHECK(options.chunk_size > 0 && options.parallelism > 0,
              "load: chunk_size and parallelism must be positive");
  struct Target {
    const Executable::Parameter* param;
    StoredTensor stored;
    DType file_dtype;
    // Blocks kept as the file stores them: copied as bytes, like a tensor in the model's dtype.
    bool verbatim = false;
    // A local file's bytes of the tensor, mapped: chunks are copied from them, not read into a
    // staging chunk first.
    std::span<const std::byte> mapped;
    Buffer buffer;
    // Where the platform's buffers cannot be written in place: the tensor staged whole in host
    // memory, uploaded by the worker that copies its last chunk.
    std::optional<HostBuffer> staged;
    std::atomic<size_t> chunks_left = 0;
  };
  std::deque<Target> targets;  // stable addresses: workers count down their chunks
  const bool in_place = platform.writes_in_place();
  LoadStats stats;
  Weights weights;
  // Whether a tensor can be used in place: a local file's bytes, in the parameter's dtype,
  // aligned. With zero_copy off, copying more of them than the memory available holds would
  // get the process killed halfway through the load: past the limit they are used in place.
  auto mappable = [&](const Executable::Parameter& p, std::span<const std::byte> mapped) {
    const StoredTensor st = store.rows(p.name);
    if (st.blocks) return !mapped.empty() && verbatim(st, p.shape.dtype());
    std::optional<DType> file_dtype = to_core_dtype(st.info.dtype);
    return !mapped.empty() && file_dtype == p.shape.dtype() &&
           reinterpret_cast<uintptr_t>(mapped.data()) % size_of(p.shape.dtype()) == 0;
  };
  bool zero_copy = options.zero_copy;
  uint64_t to_copy = 0;
  if (!zero_copy) {
    for (const Executable::Parameter& p : parameters) {
      if (mappable(p, store.mapped_bytes(p.name))) to_copy += p.shape.bytes();
    }
  }
  const uint64_t limit = options.copy_limit ? options.copy_limit : available_memory() / 10 * 9;
  const bool over_limit = to_copy > limit;
  if (over_limit) zero_copy = true;
  for (const Executable::Parameter& p : parameters) {
    const StoredTensor st = store.rows(p.name);
    const std::optional<DType> file_dtype = checked_dtype(store, st, p.name, p.shape);
    stats.bytes += p.shape.bytes();
    ++stats.tensors;
    std::span<const std::byte> mapped =
        zero_copy ? store.mapped_bytes(p.name) : std::span<const std::byte>{};
    if (mappable(p, mapped)) {
      if (auto b = platform.adopt_host(p.shape, mapped.data(), st.file)) {
        weights.emplace(p.name, *b);
        ++stats.zero_copy;
        stats.mapped_bytes += p.shape.bytes();
        continue;
      }
    }
    Target& t = targets.emplace_back();
    t.param = &p;
    t.stored = st;
    t.file_dtype = *file_dtype;
    t.verbatim = verbatim(st, p.shape.dtype());
    if (!st.decoded() || t.verbatim) t.mapped = store.mapped_bytes(p.name);
    if (in_place) {
      t.buffer = platform.allocate_for_write(p.shape);
    } else {
      t.staged.emplace(p.shape);
    }
  }

  // Chunks hold whole elements of the file's dtype, so each converts on its own; a decoded
  // tensor's hold whole rows, so each decodes on its own.
  std::vector<Chunk> chunks;
  uint64_t to_read = 0;
  for (size_t t = 0; t < targets.size(); ++t) {
    const StoredTensor& st = targets[t].stored;
    if (st.decoded() && !targets[t].verbatim) {
      const uint64_t row = std::max<uint64_t>(1, st.row_elements() * sizeof(float));
      const int64_t step = std::max<int64_t>(1, options.chunk_size / row);
      for (int64_t r = 0; r < st.rows(); r += step) {
        chunks.push_back(
            {t, static_cast<uint64_t>(r), static_cast<uint64_t>(std::min(step, st.rows() - r))});
        ++targets[t].chunks_left;
      }
      to_read += st.rows() * st.stored_row_bytes();
      continue;
    }
    uint64_t elem = targets[t].verbatim ? 1 : size_of(targets[t].file_dtype);
    uint64_t step = std::max<uint64_t>(elem, options.chunk_size / elem * elem);
    uint64_t bytes = targets[t].stored.bytes;
    for (uint64_t off = 0; off < bytes; off += step) {
      chunks.push_back({t, off, std::min(step, bytes - off)});
      ++targets[t].chunks_left;
    }
    to_read += bytes;
  }
  Progress progress(options.progress, to_read);
  auto cancelled = [&] { return options.cancel && options.cancel->load(); };
  parallel_for(chunks.size(), options.parallelism, [&](size_t i) {
    if (cancelled()) return;
    const Chunk& c = chunks[i];
    Target& t = targets[c.tensor];
    // One staging chunk (and one converted chunk) per worker, reused across chunks.
    thread_local std::vector<std::byte> staging, converted;
    const DType want = t.param->shape.dtype();
    std::span<const std::byte> bytes;
    size_t offset = 0;
    uint64_t read = 0;
    if (t.stored.decoded() && !t.verbatim) {
      const size_t out_row = loaded_row_bytes(t.stored, want);
      converted.resize(c.size * out_row);
      read_decoded_rows(t.stored, c.first, c.size, want, converted);
      bytes = converted;
      offset = c.first * out_row;
      read = c.size * t.stored.stored_row_bytes();
    } else {
      if (t.mapped.size() >= c.first + c.size) {
        bytes = t.mapped.subspan(c.first, c.size);
      } else {
        staging.resize(c.size);
        t.stored.file->read_at(t.stored.offset + c.first, staging);
        bytes = staging;
      }
      if (t.verbatim) {
        offset = c.first;
      } else {
        if (t.file_dtype != want) {
          int64_t n = static_cast<int64_t>(c.size / size_of(t.file_dtype));
          converted.resize(n * size_of(want));
          convert_elements(t.file_dtype, bytes.data(), want, converted.data(), n);
          bytes = converted;
        }
        offset = c.first / size_of(t.file_dtype) * size_of(want);
      }
      read = c.size;
    }
    if (in_place) {
      platform.write(t.buffer, offset, bytes);
    } else {
      std::memcpy(t.staged->data() + offset, bytes.data(), bytes.size());
      if (--t.chunks_left == 0) {  // the tensor is whole: one upload, and its staging goes
        t.buffer = platform.upload(*t.staged);
        t.staged.reset();
      }
    }
    progress.add(read);
  });
  PRISM_CHECK(!cancelled(), "load: cancelled");
  for (Target& t : targets) {
    if (t.staged) t.buffer = platform.upload(*t.staged);  // an empty tensor has no chunks
    weights.emplace(t.param->name, std::move(t.buffer));
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress.done();
  if (options.report && over_limit && stats.zero_copy > 0) {
    std::fprintf(stderr,
                 "load: a copy of the weights (%.2f GB) would not fit in the memory available "
                 "(%.2f GB to copy into); using the files in place instead\n",
                 to_copy / 1e9, limit / 1e9);
  }
  if (options.report) std::fprintf(stderr, "%s\n", stats.line().c_str());
  if (stats_out) *stats_out = stats;
  return weights;
}

}  // namespace
}  // namespace prism::io

namespace prism::io {

std::vector<Weights> load_sharded(const Store& store,
                                  std::span<const ShardedExecutable::Parameter> parameters,
                                  const Mesh& mesh, std::span<Platform* const> devices,
                                  const LoadOptions& options, LoadStats* stats_out,
                                  int64_t first_device) {
  auto start = std::chrono::steady_clock::now();
  const int64_t n = static_cast<int64_t>(devices.size());
  PRISM_CHECK(n >= 1 && first_device >= 0 && first_device + n <= mesh.devices(),
              "load: devices {} to {} of the mesh {}", first_device, first_device + n - 1,
              mesh.str());
  std::vector<std::string> names;
  for (const ShardedExecutable::Parameter& p : parameters) names.push_back(p.name);
  check_row_blocks(store, names);
  std::vector<Executable::Parameter> whole;
  std::vector<const ShardedExecutable::Parameter*> split;
  for (const ShardedExecutable::Parameter& p : parameters) {
    bool is_split = false;
    for (int a : p.split) is_split = is_split || a >= 0;
    if (is_split) {
      split.push_back(&p);
    } else {
      whole.push_back({p.name, p.shape});
    }
  }
  // Whole tensors: a copy on each device, as a load on one device does it.
  LoadStats stats;
  std::vector<Weights> weights(n);
  LoadOptions quiet = options;
  quiet.report = false;
  for (int64_t k = 0; k < n; ++k) {
    LoadStats s;
    weights[k] = load_whole(store, whole, *devices[k], quiet, &s);
    stats.tensors += s.tensors;
    stats.zero_copy += s.zero_copy;
    stats.bytes += s.bytes;
    stats.mapped_bytes += s.mapped_bytes;
  }

  // Split tensors: chunks of whole rows (along the first dim), each cut into the shards.
  struct Target {
    const ShardedExecutable::Parameter* param;
    StoredTensor stored;
    DType file_dtype;
    std::vector<ShardBox> boxes;
    std::vector<Buffer> buffers;
    std::vector<std::optional<HostBuffer>> staged;  // where buffers cannot be written in place
    std::vector<std::atomic<int64_t>> rows_left;
    explicit Target(int64_t devices) : rows_left(devices) {}
  };
  struct Rows {
    size_t target;
    int64_t first, count;
  };
  std::deque<Target> targets;
  std::vector<Rows> chunks;
  for (const ShardedExecutable::Parameter* p : split) {
    const StoredTensor st = store.rows(p->name);
    const std::optional<DType> file_dtype = checked_dtype(store, st, p->name, p->shape);
    Target& t = targets.emplace_back(n);
    t.param = p;
    t.stored = st;
    t.file_dtype = *file_dtype;
    const int64_t rows = p->shape.size(0);
    const int64_t row_bytes = p->shape.numel() / std::max<int64_t>(rows, 1) * size_of(*file_dtype);
    for (int64_t k = 0; k < n; ++k) {
      t.boxes.push_back(shard_box(p->shape, p->split, mesh, first_device + k));
      std::vector<Dim> dims(p->shape.dims().begin(), p->shape.dims().end());
      for (size_t d = 0; d < dims.size(); ++d) dims[d].size = t.boxes[k].size[d];
      const Shape local(p->shape.dtype(), dims);
      if (devices[k]->writes_in_place()) {
        t.buffers.push_back(devices[k]->allocate_for_write(local));
        t.staged.emplace_back();
      } else {
        t.buffers.emplace_back();
        t.staged.emplace_back(local);
      }
      t.rows_left[k] = t.boxes[k].size[0];
      stats.bytes += local.bytes();
    }
    ++stats.tensors;
    // A decoded vector is one row as stored (StoredTensor::rows): one chunk, decoded whole.
    const int64_t step =
        st.decoded() && st.info.shape.size() < 2
            ? std::max<int64_t>(rows, 1)
            : std::max<int64_t>(1, options.chunk_size / std::max<int64_t>(row_bytes, 1));
    // Only the rows some device here holds (the others' are read by their own processes).
    for (int64_t r = 0; r < rows; r += step) {
      const int64_t count = std::min(step, rows - r);
      const bool wanted = std::any_of(t.boxes.begin(), t.boxes.end(), [&](const ShardBox& b) {
        return b.size.empty() || (b.start[0] < r + count && r < b.start[0] + b.size[0]);
      });
      if (wanted) chunks.push_back({targets.size() - 1, r, count});
    }
  }
  Progress progress(options.progress, [&] {
    uint64_t total = 0;
    for (const Rows& c : chunks) {
      const Target& t = targets[c.target];
      total += t.stored.bytes * c.count / std::max<int64_t>(t.param->shape.size(0), 1);
    }
    return total;
  }());
  parallel_for(chunks.size(), options.parallelism, [&](size_t i) {
    const Rows& c = chunks[i];
    Target& t = targets[c.target];
    const Shape& shape = t.param->shape;
    const int64_t row_elems = shape.numel() / shape.size(0);
    const DType want = shape.dtype();
    thread_local std::vector<std::byte> staging, converted, piece;
    std::byte* rows = nullptr;
    uint64_t read = 0;
    if (t.stored.decoded()) {
      converted.resize(c.count * row_elems * size_of(want));
      const bool vector = t.stored.info.shape.size() < 2;  // its one stored row, whole
      read =
          read_decoded_rows(t.stored, vector ? 0 : c.first, vector ? 1 : c.count, want, converted);
      rows = converted.data();
    } else {
      staging.resize(c.count * row_elems * size_of(t.file_dtype));
      t.stored.file->read_at(t.stored.offset + c.first * row_elems * size_of(t.file_dtype),
                             staging);
      rows = staging.data();
      read = staging.size();
      if (t.file_dtype != want) {
        converted.resize(c.count * row_elems * size_of(want));
        convert_elements(t.file_dtype, staging.data(), want, converted.data(), c.count * row_elems);
        rows = converted.data();
      }
    }
    std::vector<int64_t> dims = shape.sizes();
    dims[0] = c.count;
    for (int64_t k = 0; k < n; ++k) {
      const ShardBox& box = t.boxes[k];
      const int64_t a = std::max(c.first, box.start[0]);
      const int64_t b = std::min(c.first + c.count, box.start[0] + box.size[0]);
      if (a >= b) continue;
      ShardBox part = box;
      part.start[0] = a - c.first;
      part.size[0] = b - a;
      int64_t local_row = size_of(want);
      for (size_t d = 1; d < box.size.size(); ++d) local_row *= box.size[d];
      piece.resize((b - a) * local_row);
      copy_box(rows, piece.data(), dims, part, size_of(want), true);
      const size_t offset = (a - box.start[0]) * local_row;
      if (!t.staged[k]) {
        devices[k]->write(t.buffers[k], offset, piece);
      } else {
        std::memcpy(t.staged[k]->data() + offset, piece.data(), piece.size());
        if ((t.rows_left[k] -= b - a) == 0) {
          t.buffers[k] = devices[k]->upload(*t.staged[k]);
          t.staged[k].reset();
        }
      }
    }
    progress.add(read);
  });
  for (Target& t : targets) {
    for (int64_t k = 0; k < n; ++k) {
      if (t.staged[k]) t.buffers[k] = devices[k]->upload(*t.staged[k]);
      weights[k].emplace(t.param->name, std::move(t.buffers[k]));
    }
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress.done();
  if (options.report) {
    std::fprintf(stderr, "%s, %zu split over %s\n", stats.line().c_str(), split.size(),
                 mesh.str().c_str());
  }
  if (stats_out) *stats_out = stats;
  return weights;
}

}  // namespace prism::io
