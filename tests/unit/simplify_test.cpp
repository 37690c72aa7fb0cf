// compiler::simplify's rewrites that change which ops a graph runs.
#include <gtest/gtest.h>

#include <vector>

#include "prism/compiler/passes.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

using testing::S;

int count(const ir::Graph& g, ir::Op op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += node.op == op;
  return n;
}

// A transpose that moves only axes of size 1 (a decoding step's keys, {h, s=1, hd} to
// {s=1, h, hd}) keeps every element where it is: simplify makes it a reshape, which the
// backends read in place. One that moves a longer axis stays a transpose.
TEST(Simplify, TransposesOfUnitAxesBecomeReshapes) {
  auto to_shd = [](std::span<const Tensor> in) {
    return std::vector<Tensor>{in[0].transpose({"s", "h", "hd"})};
  };
  const Shape one[] = {S({{"h", 3}, {"s", 1}, {"hd", 2}})};
  const ir::Graph g = compiler::simplify(trace(to_shd, one));
  EXPECT_EQ(count(g, ir::Op::transpose), 0);
  EXPECT_EQ(count(g, ir::Op::reshape), 1);
  const HostBuffer got = testing::run1(TraceFn(to_shd), {testing::f32(one[0], {1, 2, 3, 4, 5, 6})});
  EXPECT_EQ(got.shape(), S({{"s", 1}, {"h", 3}, {"hd", 2}}));
  testing::expect_values(got, {1, 2, 3, 4, 5, 6}, 0);

  const Shape two[] = {S({{"h", 3}, {"s", 2}, {"hd", 1}})};
  const ir::Graph kept = compiler::simplify(trace(to_shd, two));
  EXPECT_EQ(count(kept, ir::Op::transpose), 1);
  const HostBuffer moved =
      testing::run1(TraceFn(to_shd), {testing::f32(two[0], {1, 2, 3, 4, 5, 6})});
  testing::expect_values(moved, {1, 3, 5, 2, 4, 6}, 0);
}

}  // namespace
}  // namespace prism
