// Tensors with a zero-size dimension run through the CPU backend without touching memory.
#include "tests/unit/test_util.h"

namespace prism {
namespace {

using testing::S;

TEST(EmptyTensor, IntermediatesWithoutAnArenaRun) {
  // Every value here is empty, so the memory plan needs no arena at all.
  auto x = HostBuffer(S({{"r", 0}, {"c", 5}}, DType::i64));
  auto y = testing::run1(
      [](Tensor x) {
        Tensor r = Tensor::iota(x.shape(), "r"), c = Tensor::iota(x.shape(), "c");
        return select(ge(c - r, Tensor::scalar(0, DType::i64)), x, Tensor::scalar(0, DType::i64));
      },
      {x});
  EXPECT_EQ(y.shape().str(), "i64{r=0,c=5}");
  EXPECT_EQ(y.numel(), 0);
}

}  // namespace
}  // namespace prism
