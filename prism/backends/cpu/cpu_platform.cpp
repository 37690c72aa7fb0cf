#include "prism/backends/cpu/cpu_platform.h"

#include <fmt/ranges.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "prism/backends/cpu/bf16_products.h"
#include "prism/backends/cpu/dot_rows.h"
#include "prism/backends/cpu/kernels.h"
#include "prism/backends/cpu/onednn.h"
#include "prism/backends/cpu/quant_rows.h"
#include "prism/backends/cpu/simd.h"
#include "prism/backends/cpu/topology.h"
#include "prism/backends/cpu/weight_layout.h"
#include "prism/core/error.h"
#include "prism/runtime/processes.h"

namespace prism {
namespace cpu {
namespace {

// The kernels of batched decoding's products (dot_rows.h), for the device's description.
std::string rows_description() {
  const RowsKernel kernel = rows_kernel();
  // Where bf16_products.h measured the two kernels of blocked weights (not forced by
  // PRISM_CPU_ROWS), what it measured.
  // (An empty PRISM_CPU_ROWS forces nothing, as rows_kernel() reads it.)
  const char* env = std::getenv("PRISM_CPU_ROWS");
  const bool forced = env && *env;
  auto measured = [&](bool pairs) {
    const char* name = pairs ? "bf16 pair products" : "FMAs";
    if (forced) return fmt::format(", batched rows on {}", name);
    const Bf16RowsChoice& c = bf16_rows_products();
    return fmt::format(", batched rows on {} ({:.0f} GFLOP/s a core against {:.0f} on {}, {})",
                       name, pairs ? c.pairs_gflops : c.fma_gflops,
                       pairs ? c.fma_gflops : c.pairs_gflops, pairs ? "FMAs" : "bf16 pair products",
                       c.how);
  };
  switch (kernel) {
    case RowsKernel::amx:
      return ", batched rows on AMX";
    case RowsKernel::fma:
      return measured(false);
    case RowsKernel::dpbf16:
      return measured(true);
    case RowsKernel::widen:
      return ", batched rows on FMAs, bf16 widened in cache";
    case RowsKernel::onednn:
      break;
  }
  return ", batched rows in oneDNN";
}

}  // namespace

// Freed blocks are kept for reuse: fresh pages cost a fault each on first touch, which on a
// virtual machine costs more than the kernel writing them (a 64 MiB output: ~100 ms of
// faults against ~5 ms of work).
//
// Blocks of 2 MiB and more are 2 MiB-aligned and asked for transparent huge pages (where the
// kernel's setting is "madvise", the default of many distributions, nothing else gets them):
// one fault per 2 MiB instead of 512, and one TLB entry where a product or a decoding step
// streams through weights. Copying a checkpoint into such memory runs at memcpy speed rather
// than at the page-fault rate (0.4 GB/s on a virtual machine with 4 KiB pages).
class CpuPlatform::BlockCache {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  // A device of a mesh whose CPUs are one NUMA node's places the blocks it holds whole pages
  // of on that node, before anything touches them: its weights and caches then sit next to
  // the cores that read them, whichever thread loads them.
  void* allocate(size_t bytes) const {
    if (bytes < kHugePage) return std::aligned_alloc(64, bytes);
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (p && node_ >= 0) prefer_node(p, rounded, node_);  // placement only: failure leaves it
#ifdef MADV_HUGEPAGE
    if (p) ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure leaves small pages
#endif
    return p;
  }

  BlockCache(size_t limit, int node) : limit_(limit), node_(node) {}
  ~BlockCache() {
    for (auto& [bytes, p] : free_) std::free(p);
  }

  void* get(size_t bytes) {
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(bytes);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_ -= bytes;
        return p;
      }
    }
    return allocate(bytes);
  }

  void put(void* p, size_t bytes) {
    std::lock_guard lock(mutex_);
    if (cached_ + bytes > limit_) {
      std::free(p);
      return;
    }
    free_.emplace(bytes, p);
    cached_ += bytes;
  }

 private:
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
  size_t limit_;
  int node_;
};

std::unique_ptr<ExecutableImpl> make_cpu_executable(CpuPlatform& platform, const ir::Graph& graph,
                                                    const CompileSpec& spec);

namespace {
// The most memory freed blocks may keep for reuse: an eighth of the machine's.
size_t block_cache_limit() {
  return static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / 8;
}
}  // namespace

CpuPlatform::CpuPlatform() : blocks_(std::make_shared<BlockCache>(block_cache_limit(), -1)) {
  simd::current();  // chooses the SIMD target (PRISM_CPU_TARGET) before any kernel runs
}

CpuPlatform::CpuPlatform(std::vector<int> cpus, int node, std::shared_ptr<Communicator> comm,
                         int64_t device)
    : blocks_(std::make_shared<BlockCache>(block_cache_limit(), node)),
      pool_(static_cast<int>(std::max<size_t>(1, cpus.size())), cpus),
      comm_(std::move(comm)),
      device_(device),
      cpus_(std::move(cpus)),
      node_(node) {}

std::vector<DeviceInfo> CpuPlatform::devices() const {
  int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  std::string device =
      comm_ ? fmt::format("device {} of {} on CPUs {}{}, ", device_, comm_->mesh().str(),
                          fmt::join(cpus_, ","),
                          node_ >= 0 ? fmt::format(" (memory on NUMA node {})", node_) : "")
            : "";
  // Quantized weights' products with 8-bit activations (kernels_quant.cpp), and Q8_0's and
  // Q4_0's and Q4_K's on AMX tiles for batches or for every row count (quant_rows.h), or
  // Q8_0's, Q4_0's and the K-quants' (or Q4_0's alone) on weights kept interleaved
  // (weight_layout.h).
  const char* quantized = "";
  if (int8_activations(quant::GgmlType::Q4_K)) {
    quantized = ", quantized products on 8-bit activations";
    if (quant_rows_on_amx(quant::GgmlType::Q8_0, 1)) {
      quantized = ", quantized products on 8-bit activations (Q8_0, Q4_0, Q4_K on AMX-INT8)";
    } else if (quant_rows_on_amx(quant::GgmlType::Q8_0, kAmxMaxRows)) {
      quantized =
          ", quantized products on 8-bit activations (Q8_0, Q4_0, Q4_K batches on AMX-INT8)";
    } else if (interleaves(quant::GgmlType::Q8_0)) {
      quantized =
          ", quantized products on 8-bit activations (Q8_0, Q4_0, K-quant weights interleaved "
          "by 16 rows)";
    } else if (interleaves(quant::GgmlType::Q4_0)) {
      quantized = ", quantized products on 8-bit activations (Q4_0 weights interleaved by 16 rows)";
    }
  }
  // Which kernels take a prompt's bf16 products (bf16_products.h).
  std::string bf16 = ", " + bf16_products().description;
  // and, where the CPU has AMX, whether those with weights kept blocked run on prism's tiles
  // (and with them those with quantized weights, dequantized into blocks: kernels_quant.cpp).
  if (const Bf16TilesChoice& t = bf16_tile_products(); *t.how) {
    const std::string_view how = t.how;
    if (how == "PRISM_CPU_PRODUCTS") {
      bf16 +=
          t.tiles ? ", blocked and quantized ones on prism's AMX tiles (PRISM_CPU_PRODUCTS)" : "";
    } else {
      bf16 += fmt::format(
          ", blocked {} ({:.0f} GFLOP/s a core on prism's AMX tiles against {:.0f} in "
          "oneDNN, {})",
          t.tiles ? "and quantized ones on prism's AMX tiles" : "ones in oneDNN", t.tiles_gflops,
          t.onednn_gflops, how);
    }
  }
  // How far ahead decoding's products prefetch blocked bf16 weights (dot_rows.h): read, and a
  // bad PRISM_CPU_PREFETCH refused, on every CPU, shown where there are blocked weights.
  const int64_t ahead = decode_prefetch_bytes();
  const std::string prefetch = dot_row_kernels().bf16_blocked && ahead > 0
                                   ? fmt::format(", decoding prefetches {} B ahead", ahead)
                                   : "";
  return {{fmt::format("{} ({}{} threads, simd {}{}{}{}{})", cpu_model(), device, pool_.size(),
                       simd::current().describe(), bf16, rows_description(), prefetch, quantized),
           memory}};
}

int64_t CpuPlatform::mesh_capacity() const {
  const int64_t asked = devices_asked("PRISM_CPU_DEVICES");
  // In a run of several processes, each offers its own.
  return (asked ? asked : pool_.size()) * Processes::asked();
}

std::vector<Platform*> CpuPlatform::mesh_devices(const Mesh& mesh) {
  PRISM_CHECK(!comm_, "cpu: device {} of a mesh cannot itself be split", device_);
  const int64_t n = mesh.devices();
  PRISM_CHECK(n <= mesh_capacity(),
              "cpu: the mesh {} needs {} devices, the CPU offers {} (one per core; "
              "PRISM_CPU_DEVICES sets another count)",
              mesh.str(), n, mesh_capacity());
  // The threads shared out as evenly as they go, at least one each, on the CPUs of each
  // device's set (a NUMA node's cores where the mesh has one device per node).
  const int threads = pool_.size();
  std::vector<int> allowed = allowed_cpus();
  if (static_cast<int>(allowed.size()) > threads) allowed.resize(threads);  // PRISM_THREADS
  if (Processes* processes = Processes::get(); processes && n > 1) {
    // A run of several processes: this process's block of the mesh's devices, the threads
    // shared out over them.
    const int64_t local = n / processes->size(), first = processes->rank() * local;
    std::vector<NumaNode> nodes;
    std::vector<std::vector<int>> sets;
    return meshes_.get_across(
        "cpu", mesh, *processes, [&](std::shared_ptr<Communicator> comm, int64_t k) {
          if (k == first) {
            nodes = numa_nodes(allowed);
            sets = device_cpus(nodes, local);
          }
          const std::vector<int>& set = sets[k - first];
          return std::make_unique<CpuPlatform>(set, node_of(set, nodes), std::move(comm), k);
        });
  }
  if (n == 1) return {this};
  const std::vector<NumaNode> nodes = numa_nodes(allowed);
  const std::vector<std::vector<int>> sets = device_cpus(nodes, n);
  return meshes_.get(mesh, [&](std::shared_ptr<Communicator> comm, int64_t k) {
    return std::make_unique<CpuPlatform>(sets[k], node_of(sets[k], nodes), std::move(comm), k);
  });
}

void CpuPlatform::abort_collectives() {
  if (comm_) comm_->abort();
}

void CpuPlatform::reset_collectives() {
  if (comm_) comm_->reset();
}

Buffer CpuPlatform::allocate_uninitialized(const Shape& shape) {
  auto m = std::make_shared<CpuMemory>();
  m->bytes = static_cast<size_t>(shape.bytes());
  size_t rounded = (std::max<size_t>(m->bytes, 1) + 63) / 64 * 64;
  void* p = blocks_->get(rounded);
  if (!p) fail("cpu: out of memory allocating {} bytes for {}", m->bytes, shape.str());
  m->data = static_cast<std::byte*>(p);
  m->owner =
      std::shared_ptr<void>(p, [blocks = blocks_, rounded](void* q) { blocks->put(q, rounded); });
  return Buffer(shape, std::move(m), this);
}

Buffer CpuPlatform::allocate(const Shape& shape) {
  Buffer b = allocate_uninitialized(shape);
  std::memset(data_of(b), 0, static_cast<CpuMemory*>(b.memory())->bytes);
  return b;
}

std::optional<Buffer> CpuPlatform::adopt_host(const Shape& shape, const std::byte* data,
                                              std::shared_ptr<const void> owner) {
  auto m = std::make_shared<CpuMemory>();
  m->bytes = static_cast<size_t>(shape.bytes());
  // Executables write to no parameter (blocked weights are copies, made by prepare): read-only
  // mapped pages are safe to adopt.
  m->data = const_cast<std::byte*>(data);
  m->writable = false;
  m->owner = std::move(owner);
  return Buffer(shape, std::move(m), this);
}

Buffer CpuPlatform::upload(const HostBuffer& host) {
  Buffer b = allocate_uninitialized(host.shape());
  if (host.size_bytes()) std::memcpy(data_of(b), host.data(), host.size_bytes());
  return b;
}

void CpuPlatform::write(Buffer& buffer, size_t offset, std::span<const std::byte> bytes) {
  auto* m = static_cast<CpuMemory*>(buffer.memory());
  PRISM_CHECK(offset + bytes.size() <= m->bytes, "cpu: write of {} bytes at {} past the end of {}",
              bytes.size(), offset, buffer.shape().str());
  if (m->layout == WeightLayout::stored) {
    std::memcpy(m->data + offset, bytes.data(), bytes.size());
    return;
  }
  // Weights in a layout of their own take the bytes of the layout they were stored in, chunk by
  // chunk of each block the write touches (interleaved quantized rows) or element by element
  // (bf16 blocks).
  const int64_t k = buffer.shape().size(1);
  const auto* from = reinterpret_cast<const std::byte*>(bytes.data());
  if (std::optional<quant::GgmlType> format = interleaved_format(m->layout)) {
    const int64_t block_bytes = quant::info(*format).block_bytes, blocks = k / block_bytes;
    const int64_t begin = static_cast<int64_t>(offset);
    const int64_t end = begin + static_cast<int64_t>(bytes.size());
    for (int64_t at = begin / block_bytes * block_bytes; at < end; at += block_bytes) {
      const int64_t row = at / k;
      std::byte* group = m->data + row / kQuantGroupRows * kQuantGroupRows * k;
      for_each_chunk(*format, at % k / block_bytes, blocks,
                     [&](int64_t chunk, int64_t n, int64_t to) {
                       const int64_t lo = std::max(begin, at + chunk);
                       const int64_t hi = std::min(end, at + chunk + n);
                       if (lo < hi)
                         std::memcpy(group + to + row % kQuantGroupRows * n + (lo - at - chunk),
                                     from + (lo - begin), static_cast<size_t>(hi - lo));
                     });
    }
    return;
  }
  PRISM_CHECK(offset % 2 == 0 && bytes.size() % 2 == 0,
              "cpu: a write into bf16 weights must cover whole elements (offset {}, {} bytes)",
              offset, bytes.size());
  const int64_t first = static_cast<int64_t>(offset / 2);
  auto* to = reinterpret_cast<uint16_t*>(m->data);
  for (int64_t e = 0; e < static_cast<int64_t>(bytes.size() / 2); ++e) {
    const int64_t at = first + e;
    std::memcpy(to + blocked_index(at / k, at % k, k), from + 2 * e, 2);
  }
}

HostBuffer CpuPlatform::download(const Buffer& buffer) {
  auto* m = static_cast<CpuMemory*>(buffer.memory());
  if (m->layout == WeightLayout::stored) {
    return HostBuffer(buffer.shape(), std::span<const std::byte>(m->data, m->bytes));
  }
  // Weights in a layout of their own are read back as they were stored, into the copy: the
  // buffer stays as it is for the products that may be reading it.
  HostBuffer host(buffer.shape());
  copy_weights(m->layout, m->data, host.data(), buffer.shape().size(0), buffer.shape().size(1),
               false, pool_);
  return host;
}

bool CpuPlatform::supports(const ir::Node& node) const { return cpu_supports(node); }

std::unique_ptr<ExecutableImpl> CpuPlatform::compile(const ir::Graph& graph,
                                                     const CompileSpec& spec) {
  return make_cpu_executable(*this, graph, spec);
}

}  // namespace cpu

std::unique_ptr<Platform> make_cpu_platform() { return std::make_unique<cpu::CpuPlatform>(); }

}  // namespace prism
