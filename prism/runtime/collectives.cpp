#include "prism/runtime/collectives.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "prism/core/error.h"
#include "prism/core/spin.h"
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

// Where an all-reduce of `bytes` from `in` writes its result: `out`, or `staging` (to be
// copied to `out` at the end) where `out` overlaps the operand other than exactly.
std::byte* sum_into(const std::byte* in, std::byte* out, size_t bytes,
                    std::vector<std::byte>& staging) {
  if (in == out || !overlaps(in, bytes, out, bytes)) return out;
  staging.resize(bytes);
  return staging.data();
}

}  // namespace

HostCommunicator::HostCommunicator(Mesh mesh) : Communicator(std::move(mesh)) {
  const int64_t n = mesh_.devices();
  for (size_t a = 0; a < mesh_.axes().size(); ++a) {
    for (int64_t d = 0; d < n; ++d) {
      auto g = std::make_unique<Group>();
      g->slots.resize(mesh_.axes()[a].size);
      g->results.resize(mesh_.axes()[a].size);
      add_meeting(g->meeting);
      groups_.push_back(std::move(g));
    }
  }
}

HostCommunicator::Group& HostCommunicator::group(int64_t device, int mesh_axis, int64_t* place) {
  PRISM_CHECK(mesh_axis >= 0 && mesh_axis < static_cast<int>(mesh_.axes().size()) && device >= 0 &&
                  device < mesh_.devices(),
              "collectives: device {} or mesh axis {} is not in the mesh {}", device, mesh_axis,
              mesh_.str());
  *place = mesh_.coordinate(device, mesh_axis);
  const int64_t first = device - *place * mesh_.stride(mesh_axis);
  return *groups_[mesh_axis * mesh_.devices() + first];
}

void Meeting::meet(int64_t members, const std::atomic<bool>& aborted) {
  uint64_t generation = 0;
  {
    std::lock_guard lock(mutex_);
    if (aborted) fail("collectives: another device of the mesh failed");
    generation = generation_.load(std::memory_order_relaxed);
    if (++arrived_ == members) {
      arrived_ = 0;
      generation_.store(generation + 1, std::memory_order_release);
      changed_.notify_all();
      return;
    }
  }
  auto met = [&] { return generation_.load(std::memory_order_acquire) != generation; };
  if (spin_until([&] { return met() || aborted; }) && met()) return;
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return met() || aborted; });
  if (!met()) fail("collectives: another device of the mesh failed");
}

void Meeting::wake() {
  std::lock_guard lock(mutex_);
  changed_.notify_all();
}

void Meeting::clear() {
  std::lock_guard lock(mutex_);
  arrived_ = 0;
}

void Communicator::abort() {
  aborted_ = true;
  for (Meeting* m : meetings_) m->wake();
}

void Communicator::reset() {
  for (Meeting* m : meetings_) m->clear();
  aborted_ = false;
}

void HostCommunicator::barrier(Group& g) { meet(g.meeting, static_cast<int64_t>(g.slots.size())); }

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
  std::vector<std::byte> staging;
  std::byte* dst = sum_into(in, out, bytes, staging);
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

// One group of devices along one mesh axis, with members in this process.
struct ProcessCommunicator::Group {
  std::vector<int> owner;               // per place: the member's process, as its rank in `comm`
  std::vector<int64_t> local;           // the places of this process's members, in order
  std::vector<int64_t> local_of;        // per place: its index in `local`, or -1
  std::unique_ptr<ProcessGroup> comm;   // the processes owning members, or null: all here
  Meeting meeting;                      // of the members here
  std::vector<const std::byte*> slots;  // per local place: its operand
  std::vector<std::byte*> results;      // per local place: where its result goes
  // What the leader (local[0]) received from the other processes, and where each piece lies:
  // [place * local.size() + local index] for pieces meant for one member, [place] for whole
  // operands and sums.
  std::vector<std::byte> received;
  std::vector<size_t> at;
  bool here(int64_t place) const { return local_of[place] >= 0; }
};

ProcessCommunicator::ProcessCommunicator(Mesh mesh, Processes& processes)
    : Communicator(std::move(mesh)) {
  const int64_t n = mesh_.devices(), p = processes.size();
  PRISM_CHECK(n % p == 0,
              "collectives: the mesh {} has {} devices, which do not share out evenly over the "
              "run's {} processes",
              mesh_.str(), n, p);
  local_ = n / p;
  first_ = processes.rank() * local_;
  PRISM_CHECK(local_ == 1 || processes.thread_level() == Processes::ThreadLevel::multiple,
              "collectives: several devices in a process need MPI calls from several threads "
              "at once, which this MPI does not offer");
  index_.assign(mesh_.axes().size() * local_, nullptr);
  // Every process walks every group in the same order: forming an MPI group is collective
  // over the whole run.
  for (size_t a = 0; a < mesh_.axes().size(); ++a) {
    for (const std::vector<int64_t>& members : mesh_.groups(static_cast<int>(a))) {
      const auto size = static_cast<int64_t>(members.size());
      std::vector<int> processes_of;  // of the members, in order, each once
      for (int64_t device : members) {
        const int owner = static_cast<int>(device / local_);
        if (std::find(processes_of.begin(), processes_of.end(), owner) == processes_of.end()) {
          processes_of.push_back(owner);
        }
      }
      std::sort(processes_of.begin(), processes_of.end());
      const bool mine = std::find(processes_of.begin(), processes_of.end(), processes.rank()) !=
                        processes_of.end();
      std::unique_ptr<ProcessGroup> comm;
      if (processes_of.size() > 1) comm = processes.split(mine ? 0 : -1, processes.rank());
      if (!mine) continue;
      auto g = std::make_unique<Group>();
      g->comm = std::move(comm);
      g->local_of.assign(size, -1);
      for (int64_t c = 0; c < size; ++c) {
        const int owner = static_cast<int>(members[c] / local_);
        g->owner.push_back(static_cast<int>(
            std::find(processes_of.begin(), processes_of.end(), owner) - processes_of.begin()));
        if (owner == processes.rank()) {
          g->local_of[c] = static_cast<int64_t>(g->local.size());
          g->local.push_back(c);
          index_[a * local_ + (members[c] - first_)] = g.get();
        }
      }
      g->slots.resize(size);
      g->results.resize(size);
      add_meeting(g->meeting);
      groups_.push_back(std::move(g));
    }
  }
}

ProcessCommunicator::~ProcessCommunicator() = default;

ProcessCommunicator::Group& ProcessCommunicator::group(int64_t device, int mesh_axis,
                                                       int64_t* place) {
  PRISM_CHECK(device >= first_ && device < first_ + local_ && mesh_axis >= 0 &&
                  mesh_axis < static_cast<int>(mesh_.axes().size()),
              "collectives: device {} or mesh axis {} is not this process's (devices {} to {} of "
              "{})",
              device, mesh_axis, first_, first_ + local_ - 1, mesh_.str());
  *place = mesh_.coordinate(device, mesh_axis);
  return *index_[mesh_axis * local_ + (device - first_)];
}

void ProcessCommunicator::barrier(Group& g) {
  meet(g.meeting, static_cast<int64_t>(g.local.size()));
}

// The leader's exchange with the other processes of `g`: sends each member elsewhere what
// `piece(m, q, to)` writes for it (`bytes(m, q)` bytes) from each member m here, and receives
// the same from every member elsewhere for each member here, into g.received at
// g.at[m * here + i]. With `one` (a piece the same for every q), a piece goes once to each
// process, and lies at g.at[m].
template <typename Bytes, typename Piece>
void ProcessCommunicator::exchange(Group& g, bool one, Bytes bytes, Piece piece) {
  const size_t processes = static_cast<size_t>(g.comm->size());
  const int me = g.comm->rank();
  const int64_t n = static_cast<int64_t>(g.owner.size());
  const size_t here = g.local.size();
  std::vector<size_t> send_bytes(processes, 0), send_at(processes, 0);
  std::vector<size_t> recv_bytes(processes, 0), recv_at(processes, 0);
  // To process r: for each member here, its pieces for r's members (or its one piece).
  size_t sent = 0;
  for (size_t r = 0; r < processes; ++r) {
    send_at[r] = sent;
    if (static_cast<int>(r) == me) continue;
    for (int64_t m : g.local) {
      for (int64_t q = 0; q < n; ++q) {
        if (g.owner[q] != static_cast<int>(r)) continue;
        send_bytes[r] += bytes(m, q);
        if (one) break;
      }
    }
    sent += send_bytes[r];
  }
  // From process r: for each of r's members, its pieces for the members here (or its one).
  g.at.assign(one ? n : n * here, 0);
  size_t total = 0;
  for (size_t r = 0; r < processes; ++r) {
    recv_at[r] = total;
    if (static_cast<int>(r) == me) continue;
    for (int64_t m = 0; m < n; ++m) {
      if (g.owner[m] != static_cast<int>(r)) continue;
      for (size_t i = 0; i < here; ++i) {
        g.at[one ? m : m * here + i] = total;
        total += bytes(m, g.local[i]);
        if (one) break;
      }
    }
    recv_bytes[r] = total - recv_at[r];
  }
  std::vector<std::byte> packed(sent);
  for (size_t r = 0; r < processes; ++r) {
    std::byte* to = packed.data() + send_at[r];
    if (static_cast<int>(r) == me) continue;
    for (int64_t m : g.local) {
      for (int64_t q = 0; q < n; ++q) {
        if (g.owner[q] != static_cast<int>(r)) continue;
        piece(m, q, to);
        to += bytes(m, q);
        if (one) break;
      }
    }
  }
  g.received.resize(total);
  g.comm->all_to_all(packed.data(), send_bytes, send_at, g.received.data(), recv_bytes, recv_at);
}

// Each member sums its chunk of the elements over every member's operand (the chunks of the
// members elsewhere sent to this process by its leader), in member order, then every chunk
// goes to every member: HostCommunicator::all_reduce's bits.
void ProcessCommunicator::all_reduce(int64_t device, int mesh_axis, const Shape& shape,
                                     const std::byte* in, std::byte* out) {
  const size_t bytes = shape.bytes();
  const int64_t count = shape.numel();
  const size_t elem = size_of(shape.dtype());
  std::vector<std::byte> staging;
  std::byte* dst = sum_into(in, out, bytes, staging);
  int64_t place = 0;
  Group& g = group(device, mesh_axis, &place);
  const int64_t n = static_cast<int64_t>(g.owner.size());
  const size_t here = g.local.size();
  auto first = [&](int64_t q) { return count * q / n; };
  auto chunk_bytes = [&](int64_t q) { return static_cast<size_t>(first(q + 1) - first(q)) * elem; };
  g.slots[place] = in;
  g.results[place] = dst;
  barrier(g);
  const bool leader = place == g.local[0];
  if (g.comm && leader) {  // to each member elsewhere its chunk of every operand here
    exchange(
        g, false, [&](int64_t, int64_t q) { return chunk_bytes(q); },
        [&](int64_t m, int64_t q, std::byte* to) {
          std::memcpy(to, g.slots[m] + first(q) * elem, chunk_bytes(q));
        });
  }
  barrier(g);
  // Every member reads only its own chunk of the operands here, and writes only that chunk of
  // its result: a result in its operand's memory is safe.
  const int64_t a = first(place), b = first(place + 1);
  std::vector<const std::byte*> all(n);
  for (int64_t m = 0; m < n; ++m) {
    all[m] =
        g.here(m) ? g.slots[m] + a * elem : g.received.data() + g.at[m * here + g.local_of[place]];
  }
  sum_range(shape.dtype(), all, dst + a * elem, 0, b - a);
  barrier(g);
  if (g.comm && leader) {  // every sum here to every process elsewhere, once
    exchange(
        g, true, [&](int64_t m, int64_t) { return chunk_bytes(m); },
        [&](int64_t m, int64_t, std::byte* to) {
          std::memcpy(to, g.results[m] + first(m) * elem, chunk_bytes(m));
        });
  }
  barrier(g);
  for (int64_t q = 0; q < n; ++q) {
    if (q == place) continue;
    const std::byte* from =
        g.here(q) ? g.results[q] + first(q) * elem : g.received.data() + g.at[q];
    std::memcpy(dst + first(q) * elem, from, chunk_bytes(q));
  }
  barrier(g);  // no result is overwritten while another member copies from it
  if (dst != out) std::memcpy(out, dst, bytes);
}

void ProcessCommunicator::all_gather(int64_t device, int mesh_axis, int axis, const Shape& shape,
                                     const std::byte* in, std::byte* out) {
  int64_t place = 0;
  Group& g = group(device, mesh_axis, &place);
  const int64_t n = static_cast<int64_t>(g.owner.size());
  int64_t outer = 1;
  for (int a = 0; a < axis; ++a) outer *= shape.size(a);
  const size_t block = shape.numel() / std::max<int64_t>(outer, 1) * size_of(shape.dtype());
  std::vector<std::byte> staging;
  std::byte* dst = out;
  if (overlaps(in, shape.bytes(), out, shape.bytes() * n)) {
    staging.resize(shape.bytes() * n);
    dst = staging.data();
  }
  g.slots[place] = in;
  barrier(g);
  if (g.comm && place == g.local[0]) {
    exchange(
        g, true, [&](int64_t, int64_t) { return shape.bytes(); },
        [&](int64_t m, int64_t, std::byte* to) { std::memcpy(to, g.slots[m], shape.bytes()); });
  }
  barrier(g);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t q = 0; q < n; ++q) {
      const std::byte* from = g.here(q) ? g.slots[q] : g.received.data() + g.at[q];
      std::memcpy(dst + (o * n + q) * block, from + o * block, block);
    }
  }
  barrier(g);  // no operand is overwritten while another member reads it
  if (dst != out) std::memcpy(out, dst, shape.bytes() * n);
}

void ProcessCommunicator::reduce_scatter(int64_t device, int mesh_axis, int axis,
                                         const Shape& shape, const std::byte* in, std::byte* out) {
  int64_t place = 0;
  Group& g = group(device, mesh_axis, &place);
  const int64_t n = static_cast<int64_t>(g.owner.size());
  PRISM_CHECK(shape.size(axis) % n == 0, "collectives: reduce_scatter of {} over {} devices",
              shape.str(), n);
  int64_t outer = 1;
  for (int a = 0; a < axis; ++a) outer *= shape.size(a);
  const size_t elem = size_of(shape.dtype());
  const int64_t block = shape.numel() / std::max<int64_t>(outer, 1) / n;  // elements
  const size_t part = static_cast<size_t>(outer * block) * elem;          // what each member gets
  const size_t here = g.local.size();
  g.slots[place] = in;
  barrier(g);
  if (g.comm && place == g.local[0]) {
    // Member q's blocks (o * n + q) of member m's operand, for every o, packed.
    exchange(
        g, false, [&](int64_t, int64_t) { return part; },
        [&](int64_t m, int64_t q, std::byte* to) {
          for (int64_t o = 0; o < outer; ++o) {
            std::memcpy(to + o * block * elem, g.slots[m] + (o * n + q) * block * elem,
                        block * elem);
          }
        });
  }
  barrier(g);
  std::vector<std::byte> sum(part);
  std::vector<const std::byte*> rows(n);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t m = 0; m < n; ++m) {
      rows[m] = g.here(m)
                    ? g.slots[m] + (o * n + place) * block * elem
                    : g.received.data() + g.at[m * here + g.local_of[place]] + o * block * elem;
    }
    sum_range(shape.dtype(), rows, sum.data() + o * block * elem, 0, block);
  }
  barrier(g);  // every operand read: `out` may be one
  std::memcpy(out, sum.data(), part);
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

namespace {

std::vector<Platform*> platforms(const std::vector<std::unique_ptr<Platform>>& devices) {
  std::vector<Platform*> out;
  for (auto& d : devices) out.push_back(d.get());
  return out;
}

}  // namespace

std::vector<Platform*> MeshDevices::get(const Mesh& mesh, const Make& make) {
  std::lock_guard lock(mutex_);
  auto& devices = meshes_[mesh.str()];
  if (devices.empty()) {
    auto comm = std::make_shared<HostCommunicator>(mesh);
    for (int64_t k = 0; k < mesh.devices(); ++k) devices.push_back(make(comm, k));
  }
  return platforms(devices);
}

std::vector<Platform*> MeshDevices::get_across(std::string_view platform, const Mesh& mesh,
                                               Processes& processes, const Make& make) {
  const int64_t n = mesh.devices();
  PRISM_CHECK(n % processes.size() == 0,
              "{}: the mesh {} has {} devices, which do not share out evenly over this run's "
              "{} processes (give --devices={} or a multiple)",
              platform, mesh.str(), n, processes.size(), processes.size());
  std::lock_guard lock(mutex_);
  auto& devices = meshes_[mesh.str()];
  if (devices.empty()) {
    auto comm = std::make_shared<ProcessCommunicator>(mesh, processes);
    const int64_t first = comm->first_device();
    for (int64_t k = first; k < first + comm->local_devices(); ++k) {
      devices.push_back(make(comm, k));
    }
  }
  return platforms(devices);
}

}  // namespace prism
