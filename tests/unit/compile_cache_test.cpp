// Compiled programs are owned: a CompileCache finds a program again only for an equal graph,
// keeps at most its capacity, and frees what it holds when it goes; without one, an executable
// is freed with its last copy.
#include <gtest/gtest.h>

#include "prism/backends/registry.h"
#include "prism/runtime/compile.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

const Shape kRow(DType::f32, {{"d", 8}});

Executable compile_scaled(CompileCache* cache, float scale, const Shape& shape = kRow,
                          std::vector<int> donate = {}) {
  return compile(get_platform("cpu"), [scale](Tensor x) { return x * scale + 1.0f; }, {shape},
                 {.donate = std::move(donate), .cache = cache});
}

TEST(CompileCache, FindsEqualGraphsAndOnlyThose) {
  const size_t before = ExecutableImpl::live();
  {
    CompileCache cache;
    Executable a = compile_scaled(&cache, 2.0f);
    Executable again = compile_scaled(&cache, 2.0f);  // another trace of the same program
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_EQ(ExecutableImpl::live(), before + 1);
    // A different constant, shape or donation is another program.
    compile_scaled(&cache, 3.0f);
    compile_scaled(&cache, 2.0f, Shape(DType::f32, {{"d", 9}}));
    compile_scaled(&cache, 2.0f, kRow, {0});
    EXPECT_EQ(cache.size(), 4u);
    EXPECT_EQ(ExecutableImpl::live(), before + 4);
    // Each still computes its own program.
    HostBuffer x = testing::f32(kRow, {0, 1, 2, 3, 4, 5, 6, 7});
    Platform& cpu = get_platform("cpu");
    Buffer in = cpu.upload(x);
    HostBuffer y = again.call(std::span<const Buffer>{}, std::span(&in, 1))[0].to_host();
    EXPECT_EQ(y.to_f64(), (std::vector<double>{1, 3, 5, 7, 9, 11, 13, 15}));
    cache.clear();
    EXPECT_EQ(cache.size(), 0u);
    // Executables handed out keep their program after the cache lets go (a and again: one).
    EXPECT_EQ(ExecutableImpl::live(), before + 1);
  }
  EXPECT_EQ(ExecutableImpl::live(), before);
}

TEST(CompileCache, KeepsTheMostRecentlyUsedUpToItsCapacity) {
  const size_t before = ExecutableImpl::live();
  {
    CompileCache cache(2);
    compile_scaled(&cache, 1.0f);
    compile_scaled(&cache, 2.0f);
    compile_scaled(&cache, 1.0f);  // used again: 2 is now the oldest
    compile_scaled(&cache, 3.0f);  // drops 2
    EXPECT_EQ(cache.size(), 2u);
    EXPECT_EQ(ExecutableImpl::live(), before + 2);
    compile_scaled(&cache, 1.0f);  // still there: nothing compiled
    EXPECT_EQ(ExecutableImpl::live(), before + 2);
  }
  EXPECT_EQ(ExecutableImpl::live(), before);
}

TEST(CompileCache, WithoutACacheAnExecutableIsFreedWithItsLastCopy) {
  const size_t before = ExecutableImpl::live();
  {
    Executable a = compile_scaled(nullptr, 2.0f);
    Executable b = compile_scaled(nullptr, 2.0f);  // compiled again: nothing is kept
    EXPECT_EQ(ExecutableImpl::live(), before + 2);
    Executable copy = a;
    EXPECT_EQ(ExecutableImpl::live(), before + 2);
  }
  EXPECT_EQ(ExecutableImpl::live(), before);
}

}  // namespace
}  // namespace prism
