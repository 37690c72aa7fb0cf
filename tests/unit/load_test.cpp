// The load report line: the rate is over the bytes copied, and tensors used in place (which
// cost nothing until read) are counted apart instead of making up a rate.
#include "prism/io/load.h"

#include <gtest/gtest.h>

namespace prism::io {
namespace {

TEST(LoadStats, LineGivesTheRateOfTheBytesCopied) {
  LoadStats copied{.tensors = 3, .bytes = 2'000'000'000, .seconds = 0.5};
  EXPECT_EQ(copied.line(), "loaded 3 tensors, 2.00 GB in 0.50 s (4.00 GB/s)");
  LoadStats mixed{.tensors = 3,
                  .zero_copy = 2,
                  .bytes = 3'000'000'000,
                  .mapped_bytes = 2'000'000'000,
                  .seconds = 0.25};
  EXPECT_EQ(mixed.line(),
            "loaded 3 tensors, 3.00 GB in 0.25 s (4.00 GB/s; 2 tensors mapped in place, no copy)");
  LoadStats mapped{.tensors = 2,
                   .zero_copy = 2,
                   .bytes = 1'000'000'000,
                   .mapped_bytes = 1'000'000'000,
                   .seconds = 0.001};
  EXPECT_EQ(mapped.line(), "loaded 2 tensors, 1.00 GB in 0.00 s (mapped in place, no copy)");
  EXPECT_EQ(LoadStats{}.line(), "loaded 0 tensors, 0.00 GB in 0.00 s (0.00 GB/s)");
}

}  // namespace
}  // namespace prism::io
