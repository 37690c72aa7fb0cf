// How a CPU mesh's devices take the machine's CPUs: one NUMA node each where the mesh has one
// device per node, contiguous sets otherwise, shared CPUs when there are more devices.
#include "prism/backends/cpu/topology.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "prism/backends/cpu/cpu_platform.h"
#include "prism/backends/registry.h"
#include "tests/unit/test_util.h"

namespace prism::cpu {
namespace {

using Sets = std::vector<std::vector<int>>;

TEST(Topology, ParsesCpuLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5"), (std::vector<int>{5}));
  EXPECT_EQ(parse_cpu_list(""), (std::vector<int>{}));
  EXPECT_EQ(parse_cpu_list("x,2"), (std::vector<int>{2}));
}

TEST(Topology, DevicesTakeNodesThenContiguousSets) {
  const std::vector<NumaNode> two_sockets{{0, {0, 1, 2, 3}}, {1, {4, 5, 6, 7}}};
  EXPECT_EQ(device_cpus(two_sockets, 2), (Sets{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(device_cpus(two_sockets, 4), (Sets{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(device_cpus(two_sockets, 3), (Sets{{0, 1}, {2, 3, 4}, {5, 6, 7}}));
  EXPECT_EQ(device_cpus({{0, {0, 1}}}, 4), (Sets{{0}, {1}, {0}, {1}}));  // more than CPUs
  EXPECT_EQ(device_cpus({}, 2), (Sets{{}, {}}));
  // Each device's memory goes to the node holding all its CPUs; a set spanning two has none.
  EXPECT_EQ(node_of({4, 5}, two_sockets), 1);
  EXPECT_EQ(node_of({0, 1, 2, 3}, two_sockets), 0);
  EXPECT_EQ(node_of({2, 3, 4}, two_sockets), -1);
  EXPECT_EQ(node_of({}, two_sockets), -1);
  EXPECT_EQ(node_of({0, 1}, {{-1, {0, 1}}}), -1);
}

TEST(Topology, NodesHoldOnlyTheCpusAllowed) {
  const std::vector<int> allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  std::vector<int> seen;
  for (const NumaNode& node : numa_nodes(allowed)) {
    seen.insert(seen.end(), node.cpus.begin(), node.cpus.end());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, allowed);
}

// The kernel's node folders as a two-socket server shows them (node ids need not be
// contiguous), read from a copy: node order, only the allowed CPUs, the unplaced ones last.
TEST(Topology, NodesComeFromTheKernelsFolders) {
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("prism-nodes-" + std::to_string(getpid()));
  const std::pair<const char*, const char*> folders[] = {
      {"node2", "4-7\n"}, {"node0", "0-3\n"}, {"node5", "\n"}, {"nodeX", "9\n"}};
  for (const auto& [name, cpus] : folders) {
    std::filesystem::create_directories(root / name);
    std::ofstream(root / name / "cpulist") << cpus;
  }
  EXPECT_EQ(numa_nodes({0, 1, 2, 3, 4, 5, 6, 7, 8}, root.string()),
            (std::vector<NumaNode>{{0, {0, 1, 2, 3}}, {2, {4, 5, 6, 7}}, {-1, {8}}}));
  EXPECT_EQ(numa_nodes({1, 5}, root.string()), (std::vector<NumaNode>{{0, {1}}, {2, {5}}}));
  EXPECT_EQ(numa_nodes({0, 1}, (root / "absent").string()), (std::vector<NumaNode>{{-1, {0, 1}}}));
  std::filesystem::remove_all(root);
}

// A mesh device on one node asks the kernel to place its blocks there: the policy of the
// pages says so (on a machine with one node, node 0).
TEST(Topology, MemoryIsPlacedOnTheNodeAsked) {
  const size_t bytes = size_t{4} << 20;
  void* p = std::aligned_alloc(size_t{2} << 20, bytes);
  ASSERT_NE(p, nullptr);
  const std::vector<NumaNode> nodes = numa_nodes(allowed_cpus());
  if (nodes.empty() || nodes[0].id < 0 || !prefer_node(p, bytes, nodes[0].id)) {
    std::free(p);
    GTEST_SKIP() << "this machine shows no NUMA nodes or refuses memory policies";
  }
  EXPECT_EQ(preferred_node(p), nodes[0].id);
  EXPECT_EQ(preferred_node(static_cast<char*>(p) + bytes - 1), nodes[0].id);
  std::free(p);
  EXPECT_FALSE(prefer_node(p, bytes, -1));
}

// Each device of a CPU mesh whose CPUs lie in one node places its buffers on that node.
TEST(Topology, MeshDevicesPlaceTheirMemoryOnTheirNode) {
  testing::CpuDevices two(2);
  auto& cpu = static_cast<CpuPlatform&>(get_platform("cpu"));
  int placed = 0;
  for (Platform* p : cpu.mesh_devices(Mesh({{"model", 2}}))) {
    auto* device = static_cast<CpuPlatform*>(p);
    if (device->numa_node() < 0) continue;
    Buffer b = device->allocate(Shape(DType::f32, {{"x", int64_t{1} << 20}}));
    const int node = preferred_node(data_of(b));
    if (node < 0) GTEST_SKIP() << "this machine refuses memory policies";
    EXPECT_EQ(node, device->numa_node());
    EXPECT_NE(device->devices()[0].name.find(
                  fmt::format("(memory on NUMA node {})", device->numa_node())),
              std::string::npos)
        << device->devices()[0].name;
    ++placed;
  }
  if (!placed) GTEST_SKIP() << "no device's CPUs lie in one NUMA node here";
}

}  // namespace
}  // namespace prism::cpu
