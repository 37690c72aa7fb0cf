#include "prism/runtime/collectives.h"

#include <cstring>

#include "prism/core/error.h"

namespace prism {
namespace {

// Calls f(T{}) with T the type the sums accumulate in, read and written through `load` and
// `store` for the storage dtype.
template <typename F>
void with_sum_type(DType t, F&& f) {
  switch (t) {
    case DType::f32:
      return f(
          float{}, [](const std::byte* p) { return double(*reinterpret_cast<const float*>(p)); },
          [](double v, std::byte* p) { *reinterpret_cast<float*>(p) = static_cast<float>(v); });
    case DType::f64:
      return f(
          double{}, [](const std::byte* p) { return *reinterpret_cast<const double*>(p); },
          [](double v, std::byte* p) { *reinterpret_cast<double*>(p) = v; });
    case DType::bf16:
      return f(
          uint16_t{},
          [](const std::byte* p) {
            return double(bf16_to_f32(*reinterpret_cast<const uint16_t*>(p)));
          },
          [](double v, std::byte* p) {
            *reinterpret_cast<uint16_t*>(p) = f32_to_bf16(static_cast<float>(v));
          });
    case DType::f16:
      return f(
          uint16_t{},
          [](const std::byte* p) {
            return double(f16_to_f32(*reinterpret_cast<const uint16_t*>(p)));
          },
          [](double v, std::byte* p) {
            *reinterpret_cast<uint16_t*>(p) = f32_to_f16(static_cast<float>(v));
          });
    default:
      fail("collectives: sums of {} are not supported", name(t));
  }
}

bool overlaps(const std::byte* a, size_t an, const std::byte* b, size_t bn) {
  return a < b + bn && b < a + an;
}

}  // namespace

HostCommunicator::HostCommunicator(Mesh mesh) : mesh_(std::move(mesh)) {
  const int64_t n = mesh_.devices();
  for (size_t a = 0; a < mesh_.axes().size(); ++a) {
    for (int64_t d = 0; d < n; ++d) {
      auto g = std::make_unique<Group>();
      g->slots.resize(mesh_.axes()[a].size);
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

void HostCommunicator::all_reduce(int64_t device, int mesh_axis, const Shape& shape,
                                  const std::byte* in, std::byte* out) {
  const size_t bytes = shape.bytes();
  const int64_t count = shape.numel();
  const int elem = size_of(shape.dtype());
  std::vector<std::byte> staging;
  std::byte* dst = out;
  if (overlaps(in, bytes, out, bytes)) {
    staging.resize(bytes);
    dst = staging.data();
  }
  exchange(device, mesh_axis, in, [&](std::span<const std::byte* const> all, int64_t) {
    if (is_integer(shape.dtype())) {
      with_integer_type(shape.dtype(), [&](auto zero) {
        using T = decltype(zero);
        for (int64_t i = 0; i < count; ++i) {
          T sum = 0;
          for (const std::byte* p : all)
            sum = static_cast<T>(sum + reinterpret_cast<const T*>(p)[i]);
          reinterpret_cast<T*>(dst)[i] = sum;
        }
      });
      return;
    }
    with_sum_type(shape.dtype(), [&](auto, auto load, auto store) {
      for (int64_t i = 0; i < count; ++i) {
        double sum = 0;
        for (const std::byte* p : all) sum += load(p + i * elem);
        store(sum, dst + i * elem);
      }
    });
  });
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
  std::vector<Dim> dims(shape.dims().begin(), shape.dims().end());
  dims[axis].size /= n;
  const Shape block_shape(shape.dtype(), dims);
  int64_t outer = 1;
  for (int a = 0; a < axis; ++a) outer *= shape.size(a);
  const int elem = size_of(shape.dtype());
  const int64_t block = block_shape.numel() / std::max<int64_t>(outer, 1);  // elements
  std::vector<std::byte> staging(block_shape.bytes());
  exchange(device, mesh_axis, in, [&](std::span<const std::byte* const> all, int64_t place) {
    with_sum_type(shape.dtype(), [&](auto, auto load, auto store) {
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < block; ++i) {
          const int64_t at = (o * n + place) * block + i;
          double sum = 0;
          for (const std::byte* p : all) sum += load(p + at * elem);
          store(sum, staging.data() + (o * block + i) * elem);
        }
      }
    });
  });
  std::memcpy(out, staging.data(), staging.size());
}

}  // namespace prism
