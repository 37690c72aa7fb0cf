// How a CPU mesh's devices take the machine's CPUs: one NUMA node each where the mesh has one
// device per node, contiguous sets otherwise, shared CPUs when there are more devices.
#include "prism/backends/cpu/topology.h"

#include <gtest/gtest.h>

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
  const Sets two_sockets{{0, 1, 2, 3}, {4, 5, 6, 7}};
  EXPECT_EQ(device_cpus(two_sockets, 2), (Sets{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(device_cpus(two_sockets, 4), (Sets{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(device_cpus(two_sockets, 3), (Sets{{0, 1}, {2, 3, 4}, {5, 6, 7}}));
  EXPECT_EQ(device_cpus({{0, 1}}, 4), (Sets{{0}, {1}, {0}, {1}}));  // more devices than CPUs
  EXPECT_EQ(device_cpus({}, 2), (Sets{{}, {}}));
}

TEST(Topology, NodesHoldOnlyTheCpusAllowed) {
  const std::vector<int> allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  std::vector<int> seen;
  for (const auto& node : numa_cpus(allowed)) seen.insert(seen.end(), node.begin(), node.end());
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, allowed);
}

}  // namespace
}  // namespace prism::cpu
