// prism smi's Level Zero source against a fake loader (tests/smi/fake_level_zero.cpp) built
// with the vendor's own header: the readings and processes (rates from two samples, the fake's
// counters advancing one second a call), a GPU lost between samples, a reading that fails, and
// a library that is missing, incomplete or fails to start.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "prism/smi/smi.h"

namespace prism::smi {
namespace {

#ifdef PRISM_FAKE_LEVEL_ZERO
struct FakeLevelZero {
  explicit FakeLevelZero(const char* script = "") {
    setenv("PRISM_LEVEL_ZERO_LIBRARY", PRISM_FAKE_LEVEL_ZERO, 1);
    setenv("FAKE_LEVEL_ZERO", script, 1);
  }
  ~FakeLevelZero() {
    unsetenv("PRISM_LEVEL_ZERO_LIBRARY");
    unsetenv("FAKE_LEVEL_ZERO");
  }
};

TEST(SmiLevelZero, ReadingsAndProcesses) {
  FakeLevelZero fake;
  std::string absent;
  auto source = level_zero_source(&absent);
  ASSERT_TRUE(source) << absent;
  EXPECT_EQ(source->name(), "level-zero");
  // The first sample: no rates yet.
  std::vector<Device> d = source->sample();
  ASSERT_EQ(d.size(), 2u);  // the NPU between the GPUs is not one
  EXPECT_FALSE(d[0].utilization);
  EXPECT_FALSE(d[0].power_w);
  EXPECT_EQ(d[0].clock_mhz, 1550.0);
  d = source->sample();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].source, "level-zero");
  EXPECT_EQ(d[0].index, 0);
  EXPECT_EQ(d[0].name, "Intel Data Center GPU Max 1100 (fake)");
  EXPECT_EQ(d[0].utilization, 0.25);  // the compute engines', not all engines' 50%
  EXPECT_EQ(d[0].memory_used, 16ull << 30);
  EXPECT_EQ(d[0].memory_total, 48ull << 30);  // the device's, not the system memory's
  EXPECT_EQ(d[0].temperature_c, 48.5);        // the GPU sensor, not the global or memory ones
  EXPECT_EQ(d[0].power_w, 300.0);             // the device's domain, not its tile's
  EXPECT_EQ(d[0].clock_mhz, 1550.0);          // the GPU domain, not the memory's
  ASSERT_EQ(d[0].processes.size(), 1u);
  EXPECT_EQ(d[0].processes[0].pid, getpid());
  EXPECT_EQ(d[0].processes[0].name, "prism-unit-test");  // /proc's comm: 15 characters
  EXPECT_EQ(d[0].processes[0].memory_bytes, 6ull << 30);
  EXPECT_TRUE(d[0].errors.empty()) << d[0].errors[0];
  // GPU 1: per-tile all-engines groups, averaged; no power domains (unsupported: left out,
  // not an error); the hotter tile; the tiles' mean clock.
  EXPECT_EQ(d[1].index, 1);
  EXPECT_EQ(d[1].name, "Intel Arc A770 (fake)");
  EXPECT_EQ(d[1].utilization, 0.4);
  EXPECT_EQ(d[1].memory_used, 1ull << 30);
  EXPECT_EQ(d[1].memory_total, 16ull << 30);
  EXPECT_EQ(d[1].temperature_c, 63.5);
  EXPECT_FALSE(d[1].power_w);
  EXPECT_EQ(d[1].clock_mhz, 2050.0);
  EXPECT_TRUE(d[1].processes.empty());
  EXPECT_TRUE(d[1].errors.empty()) << d[1].errors[0];
  // And the next interval's rates are the same.
  d = source->sample();
  EXPECT_EQ(d[0].utilization, 0.25);
  EXPECT_EQ(d[0].power_w, 300.0);
}

TEST(SmiLevelZero, AGpuLostBetweenSamplesIsSaidAndTheOtherStays) {
  FakeLevelZero fake("lose-gpu-1");
  auto source = level_zero_source();
  ASSERT_TRUE(source);
  ASSERT_EQ(source->sample().size(), 2u);
  for (int i = 0; i < 2; ++i) {  // and it stays lost
    std::vector<Device> d = source->sample();
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(d[0].name, "Intel Data Center GPU Max 1100 (fake)");
    EXPECT_EQ(d[0].utilization, 0.25);
    EXPECT_EQ(d[0].power_w, 300.0);
    EXPECT_TRUE(d[0].errors.empty()) << d[0].errors[0];
    EXPECT_EQ(d[1].name, "Intel Arc A770 (fake)");  // as it was last seen
    EXPECT_EQ(d[1].errors,
              std::vector<std::string>{
                  "device lost: hung, reset or removed (ZE_RESULT_ERROR_DEVICE_LOST)"});
    EXPECT_FALSE(d[1].utilization);
    EXPECT_FALSE(d[1].memory_total);
    EXPECT_FALSE(d[1].temperature_c);
    EXPECT_FALSE(d[1].clock_mhz);
  }
}

TEST(SmiLevelZero, AFailingReadingIsSaidAndTheOthersStay) {
  FakeLevelZero fake("temperature-denied");
  auto source = level_zero_source();
  ASSERT_TRUE(source);
  source->sample();
  std::vector<Device> d = source->sample();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].errors, std::vector<std::string>{"temperature: permission denied "
                                                  "(ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS)"});
  EXPECT_FALSE(d[0].temperature_c);
  EXPECT_EQ(d[0].name, "Intel Data Center GPU Max 1100 (fake)");
  EXPECT_EQ(d[0].utilization, 0.25);
  EXPECT_EQ(d[0].memory_used, 16ull << 30);
  EXPECT_EQ(d[0].power_w, 300.0);
  EXPECT_EQ(d[0].clock_mhz, 1550.0);
  EXPECT_EQ(d[0].processes.size(), 1u);
  EXPECT_EQ(d[1].temperature_c, 63.5);  // the other GPU's is fine
  EXPECT_TRUE(d[1].errors.empty()) << d[1].errors[0];
}

TEST(SmiLevelZero, ALibraryThatFailsToStartIsAbsent) {
  FakeLevelZero fake("init-fails");
  std::string absent;
  EXPECT_FALSE(level_zero_source(&absent));
  EXPECT_EQ(absent, "level-zero: zeInit found no GPU driver (ZE_RESULT_ERROR_UNINITIALIZED)");
}
#endif

TEST(SmiLevelZero, AMissingOrIncompleteLibraryIsAbsent) {
  std::string absent;
  setenv("PRISM_LEVEL_ZERO_LIBRARY", "/nonexistent/libze_loader.so.1", 1);
  EXPECT_FALSE(level_zero_source(&absent));
#ifdef PRISM_FAKE_LEVEL_ZERO
  EXPECT_EQ(absent,
            "level-zero: /nonexistent/libze_loader.so.1 not found (Debian's libze1 installs it)");
  // A library that is not the loader (the C library's maths) lacks its first function.
  setenv("PRISM_LEVEL_ZERO_LIBRARY", "libm.so.6", 1);
  EXPECT_FALSE(level_zero_source(&absent));
  EXPECT_EQ(absent, "level-zero: libm.so.6 has no zeInit (not a Level Zero loader?)");
#else
  EXPECT_EQ(absent,
            "level-zero: this prism was built without level_zero/zes_api.h (scripts/setup.sh "
            "installs it)");
#endif
  unsetenv("PRISM_LEVEL_ZERO_LIBRARY");
}

}  // namespace
}  // namespace prism::smi
