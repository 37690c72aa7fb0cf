#include "prism/runtime/collectives.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "prism/core/error.h"
#include "prism/runtime/processes.h"

namespace prism {
namespace {

// out[i] = the sum over `all` of their i-th elements, for i in [first, last): each element
// read as double, summed in the devices' order, rounded once to the storage type. Blocks of
// 256 keep the loops over elements innermost, where the compiler vectorizes them.
template <typename T, typename Load, typename Store>
void sum_range(std::span<const std::byte* const> all, std::byte* out, int64_t first, int64_t last,
               Load load, Store store) {
  constexpr int64_t kBlock = 256;
  double acc[kBlock];
  for (int64_t at = first; at < last; at += kBlock) {
    const int64_t m = std::min(kBlock, last - at);
    for (int64_t j = 0; j < m; ++j) acc[j] = 0;
    for (const std::byte* p : all) {
      const T* x = reinterpret_cast<const T*>(p) + at;
      for (int64_t j = 0; j < m; ++j) acc[j] += load(x[j]);
    }
    T* y = reinterpret_cast<T*>(out) + at;
    for (int64_t j = 0; j < m; ++j) y[j] = store(acc[j]);
  }
}

void sum_range(DType t, std::span<const std::byte* const> all, std::byte* out, int64_t first,
               int64_t last) {
  switch (t) {
    case DType::f32:
      return sum_range<float>(
          all, out, first, last, [](float v) { return double(v); },
          [](double v) { return static_cast<float>(v); });
    case DType::f64:
      return sum_range<double>(
          all, out, first, last, [](double v) { return v; }, [](double v) { return v; });
    case DType::bf16:
      return sum_range<uint16_t>(
          all, out, first, last, [](uint16_t v) { return double(bf16_to_f32(v)); },
          [](double v) { return f32_to_bf16(static_cast<float>(v)); });
    case DType::f16:
      return sum_range<uint16_t>(
          all, out, first, last, [](uint16_t v) { return double(f16_to_f32(v)); },
          [](double v) { return f32_to_f16(static_cast<float>(v)); });
    default:
      if (!is_integer(t)) fail("collectives: sums of {} are not supported", name(t));
      with_integer_type(t, [&](auto zero) {
        using T = decltype(zero);
        for (int64_t i = first; i < last; ++i) {
          T sum = 0;
          for (const std::byte* p : all) {
            sum = static_cast<T>(sum + reinterpret_cast<const T*>(p)[i]);
          }
          reinterpret_cast<T*>(out)[i] = sum;
        }
      });
  }
}

bool overlaps(const std::byte* a, size_t an, const std::byte* b, size_t bn) {
  return a < b + bn && b < a + an;
}

}  // namespace

HostCommunicator::HostCommunicator(Mesh mesh) : Communicator(std::move(mesh)) {
  const int64_t n = mesh_.devices();
  for (size_t a = 0; a < mesh_.axes().size(); ++a) {
    for (int64_t d = 0; d < n; ++d) {
      auto g = std::make_unique<Group>();
      g->slots.resize(mesh_.axes()[a].size);
      g->results.resize(mesh_.axes()[a].size);
      groups_.push_back(std::move(g));
    }
  }
}

HostCommunicator::Group& HostCommunicator::group(int64_t device, int mesh_axis, int64_t* place) {
  PRISM_CHECK(mesh_axis >= 0 && mesh_axis < static_cast<int>(mesh_.axes().size()) && device >= 0 &&
                  device < mesh_.devices(),
              "collectives: device {} or mesh axis {} is not in the mesh {}", device, mesh_axis,
              mesh_.str());
  int64_t stride = 1;
  for (size_t a = mesh_axis + 1; a < mesh_.axes().size(); ++a) stride *= mesh_.axes()[a].size;
  *place = mesh_.coordinate(device, mesh_axis);
  const int64_t first = device - *place * stride;
  return *groups_[mesh_axis * mesh_.devices() + first];
}

void HostCommunicator::barrier(Group& g) {
  std::unique_lock lock(g.mutex);
  if (aborted_) fail("collectives: another device of the mesh failed");
  const uint64_t generation = g.generation;
  if (++g.arrived == static_cast<int64_t>(g.slots.size())) {
    g.arrived = 0;
    ++g.generation;
    g.changed.notify_all();
    return;
  }
  g.changed.wait(lock, [&] { return g.generation != generation || aborted_; });
  if (g.generation == generation) fail("collectives: another device of the mesh failed");
}

void HostCommunicator::abort() {
  aborted_ = true;
  for (auto& g : groups_) {
    std::lock_guard lock(g->mutex);
    g->changed.notify_all();
  }
}

void HostCommunicator::reset() {
  for (auto& g : groups_) {
    std::lock_guard lock(g->mutex);
    g->arrived = 0;
  }
  aborted_ = false;
}

template <typename F>
void HostCommunicator::exchange(int64_t device, int mesh_axis, const std::byte* in, F&& work) {
  int64_t place = 0;
  Group& g = group(device, mesh_axis, &place);
  g.slots[place] = in;
  barrier(g);
  work(std::span<const std::byte* const>(g.slots), place);
  barrier(g);
}

// Each device sums one chunk of the elements (its share of the work) into its own result,
// then copies the other chunks from the devices that summed them.
void HostCommunicator::all_reduce(int64_t device, int mesh_axis, const Shape& shape,
                                  const std::byte* in, std::byte* out) {
  const size_t bytes = shape.bytes();
  const int64_t count = shape.numel();
  const int elem = size_of(shape.dtype());
  // A result that overlaps the operand other than exactly is summed apart.
  std::vector<std::byte> staging;
  std::byte* dst = out;
  if (in != out && overlaps(in, bytes, out, bytes)) {
    staging.resize(bytes);
    dst = staging.data();
  }
  int64_t place = 0;
  Group& g = group(device, mesh_axis, &place);
  const int64_t n = static_cast<int64_t>(g.slots.size());
  auto chunk = [&](int64_t q) { return std::pair{count * q / n, count * (q + 1) / n}; };
  g.slots[place] = in;
  g.results[place] = dst;
  barrier(g);
  // Every device reads only its own chunk of the others' operands, and writes only that
  // chunk of its result: a result in its operand's memory is safe.
  const auto [first, last] = chunk(place);
  sum_range(shape.dtype(), g.slots, dst, first, last);
  barrier(g);
  for (int64_t q = 0; q < n; ++q) {
    if (q == place) continue;
    const auto [a, b] = chunk(q);
    std::memcpy(dst + a * elem, g.results[q] + a * elem, (b - a) * elem);
  }
  barrier(g);  // no result is overwritten while another device copies from it
  if (dst != out) std::memcpy(out, dst, bytes);
}

void HostCommunicator::all_gather(int64_t device, int mesh_axis, int axis, const Shape& shape,
                                  const std::byte* in, std::byte* out) {
  const int64_t n = mesh_.axes()[mesh_axis].size;
  int64_t outer = 1;
  for (int a = 0; a < axis; ++a) outer *= shape.size(a);
  const size_t block = shape.numel() / std::max<int64_t>(outer, 1) * size_of(shape.dtype());
  std::vector<std::byte> staging;
  std::byte* dst = out;
  if (overlaps(in, shape.bytes(), out, shape.bytes() * n)) {
    staging.resize(shape.bytes() * n);
    dst = staging.data();
  }
  exchange(device, mesh_axis, in, [&](std::span<const std::byte* const> all, int64_t) {
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t g = 0; g < n; ++g) {
        std::memcpy(dst + (o * n + g) * block, all[g] + o * block, block);
      }
    }
  });
  if (dst != out) std::memcpy(out, dst, shape.bytes() * n);
}

void HostCommunicator::reduce_scatter(int64_t device, int mesh_axis, int axis, const Shape& shape,
                                      const std::byte* in, std::byte* out) {
  const int64_t n = mesh_.axes()[mesh_axis].size;
  PRISM_CHECK(shape.size(axis) % n == 0, "collectives: reduce_scatter of {} over {} devices",
              shape.str(), n);
  int64_t outer = 1;
  for (int a = 0; a < axis; ++a) outer *= shape.size(a);
  const int elem = size_of(shape.dtype());
  const int64_t block = shape.numel() / std::max<int64_t>(outer, 1) / n;  // elements
  std::vector<std::byte> staging(shape.bytes() / n);
  exchange(device, mesh_axis, in, [&](std::span<const std::byte* const> all, int64_t place) {
    std::vector<const std::byte*> rows(all.size());
    for (int64_t o = 0; o < outer; ++o) {
      const int64_t at = (o * n + place) * block;
      for (size_t q = 0; q < all.size(); ++q) rows[q] = all[q] + at * elem;
      sum_range(shape.dtype(), rows, staging.data() + o * block * elem, 0, block);
    }
  });
  std::memcpy(out, staging.data(), staging.size());
}

ProcessCommunicator::ProcessCommunicator(Mesh mesh, Processes& processes)
    : Communicator(std::move(mesh)), device_(processes.rank()) {
  PRISM_CHECK(mesh_.devices() == processes.size(),
              "collectives: the mesh {} has {} devices and the run {} processes (one device each)",
              mesh_.str(), mesh_.devices(), processes.size());
  // Every process makes the groups of every axis in the same order: MPI_Comm_split is
  // collective over the whole run.
  for (size_t a = 0; a < mesh_.axes().size(); ++a) {
    int64_t stride = 1;
    for (size_t b = a + 1; b < mesh_.axes().size(); ++b) stride *= mesh_.axes()[b].size;
    const int64_t place = mesh_.coordinate(device_, static_cast<int>(a));
    groups_.push_back(
        processes.split(static_cast<int>(device_ - place * stride), static_cast<int>(place)));
  }
}

ProcessCommunicator::~ProcessCommunicator() = default;

ProcessGroup& ProcessCommunicator::group(int64_t device, int mesh_axis) {
  PRISM_CHECK(device == device_ && mesh_axis >= 0 && mesh_axis < static_cast<int>(groups_.size()),
              "collectives: device {} or mesh axis {} is not this process's (device {} of {})",
              device, mesh_axis, device_, mesh_.str());
  return *groups_[mesh_axis];
}

// Each process sums one chunk of the elements from every member's operand (sent to it by
// all-to-all), in member order, then every chunk goes to every member: the bits of
// HostCommunicator::all_reduce.
void ProcessCommunicator::all_reduce(int64_t device, int mesh_axis, const Shape& shape,
                                     const std::byte* in, std::byte* out) {
  ProcessGroup& g = group(device, mesh_axis);
  const size_t n = static_cast<size_t>(g.size()), place = static_cast<size_t>(g.rank());
  const int64_t count = shape.numel();
  const size_t elem = size_of(shape.dtype());
  auto first = [&](size_t q) { return static_cast<size_t>(count * static_cast<int64_t>(q) / n); };
  const size_t mine = first(place + 1) - first(place);  // elements of this process's chunk
  std::vector<size_t> send_bytes(n), send_at(n), recv_bytes(n, mine * elem), recv_at(n);
  for (size_t q = 0; q < n; ++q) {
    send_bytes[q] = (first(q + 1) - first(q)) * elem;
    send_at[q] = first(q) * elem;
    recv_at[q] = q * mine * elem;
  }
  std::vector<std::byte> parts(n * mine * elem), sum(std::max<size_t>(mine, 1) * elem);
  g.all_to_all(in, send_bytes, send_at, parts.data(), recv_bytes, recv_at);
  std::vector<const std::byte*> all(n);
  for (size_t q = 0; q < n; ++q) all[q] = parts.data() + q * mine * elem;
  sum_range(shape.dtype(), all, sum.data(), 0, static_cast<int64_t>(mine));
  // The chunks to every member: the operand has been read whole, so `out` may be `in`.
  std::vector<size_t> chunk_bytes(n, mine * elem), zero(n, 0);
  g.all_to_all(sum.data(), chunk_bytes, zero, out, send_bytes, send_at);
}

void ProcessCommunicator::all_gather(int64_t device, int mesh_axis, int axis, const Shape& shape,
                                     const std::byte* in, std::byte* out) {
  ProcessGroup& g = group(device, mesh_axis);
  const int64_t n = g.size();
  int64_t outer = 1;
  for (int a = 0; a < axis; ++a) outer *= shape.size(a);
  const size_t block = shape.numel() / std::max<int64_t>(outer, 1) * size_of(shape.dtype());
  std::vector<std::byte> all(shape.bytes() * n);
  g.all_gather(in, shape.bytes(), all.data());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t q = 0; q < n; ++q) {
      std::memcpy(out + (o * n + q) * block, all.data() + q * shape.bytes() + o * block, block);
    }
  }
}

void ProcessCommunicator::reduce_scatter(int64_t device, int mesh_axis, int axis,
                                         const Shape& shape, const std::byte* in, std::byte* out) {
  ProcessGroup& g = group(device, mesh_axis);
  const int64_t n = g.size();
  PRISM_CHECK(shape.size(axis) % n == 0, "collectives: reduce_scatter of {} over {} devices",
              shape.str(), n);
  int64_t outer = 1;
  for (int a = 0; a < axis; ++a) outer *= shape.size(a);
  const size_t elem = size_of(shape.dtype());
  const int64_t block = shape.numel() / std::max<int64_t>(outer, 1) / n;  // elements
  const size_t part = static_cast<size_t>(outer * block) * elem;          // what each member gets
  // Member q's blocks (o * n + q) for every o, packed for it.
  std::vector<std::byte> packed(part * n), parts(part * n);
  for (int64_t q = 0; q < n; ++q) {
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(packed.data() + q * part + o * block * elem, in + (o * n + q) * block * elem,
                  block * elem);
    }
  }
  std::vector<size_t> bytes(n, part), at(n);
  for (int64_t q = 0; q < n; ++q) at[q] = q * part;
  g.all_to_all(packed.data(), bytes, at, parts.data(), bytes, at);
  std::vector<const std::byte*> rows(n);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t p = 0; p < n; ++p) rows[p] = parts.data() + p * part + o * block * elem;
    sum_range(shape.dtype(), rows, out + o * block * elem, 0, block);
  }
}

void check_collective(std::string_view platform, const ir::Graph& graph, ir::ValueId id,
                      const Communicator* comm) {
  const ir::Node& n = graph.node(id);
  const auto& c = n.attr<ir::CollectiveAttrs>();
  if (c.group == 1) return;
  PRISM_CHECK(comm, "{}: {} across {} devices outside a mesh ({})", platform, ir::op_name(n.op),
              c.group, ir::print(graph, id));
  PRISM_CHECK(c.mesh_axis < static_cast<int>(comm->mesh().axes().size()) &&
                  comm->mesh().axes()[c.mesh_axis].size == c.group,
              "{}: {} over {} devices of mesh axis {}, but the mesh is {}", platform,
              ir::op_name(n.op), c.group, c.mesh_axis, comm->mesh().str());
}

void run_collective(const ir::Node& node, const Shape& operand, Communicator* comm, int64_t device,
                    const std::byte* in, std::byte* out) {
  const auto& c = node.attr<ir::CollectiveAttrs>();
  switch (node.op) {
    case ir::Op::mesh_coordinate: {
      const int32_t at =
          comm ? static_cast<int32_t>(comm->mesh().coordinate(device, c.mesh_axis)) : 0;
      std::memcpy(out, &at, sizeof at);
      return;
    }
    case ir::Op::all_reduce:
    case ir::Op::all_gather:
    case ir::Op::reduce_scatter:
      break;
    default:
      fail("collectives: {} is not a collective", ir::op_name(node.op));
  }
  if (c.group == 1) {  // a group of one: the operand as it is
    if (out != in) std::memmove(out, in, operand.bytes());
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  if (node.op == ir::Op::all_reduce) {
    comm->all_reduce(device, c.mesh_axis, operand, in, out);
  } else if (node.op == ir::Op::all_gather) {
    comm->all_gather(device, c.mesh_axis, c.axis, operand, in, out);
  } else {
    comm->reduce_scatter(device, c.mesh_axis, c.axis, operand, in, out);
  }
  comm->count(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
}

int64_t devices_asked(const char* variable) {
  const char* env = std::getenv(variable);
  if (!env || !*env) return 0;
  char* end = nullptr;
  const long long n = std::strtoll(env, &end, 10);
  PRISM_CHECK(*end == '\0' && n >= 1, "{}={} is not a number of devices", variable, env);
  return n;
}

std::vector<Platform*> MeshDevices::get(const Mesh& mesh, const Make& make) {
  std::lock_guard lock(mutex_);
  auto& devices = meshes_[mesh.str()];
  if (devices.empty()) {
    auto comm = std::make_shared<HostCommunicator>(mesh);
    for (int64_t k = 0; k < mesh.devices(); ++k) devices.push_back(make(comm, k));
  }
  std::vector<Platform*> out;
  for (auto& d : devices) out.push_back(d.get());
  return out;
}

}  // namespace prism
