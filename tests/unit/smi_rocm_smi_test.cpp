// prism smi's ROCm SMI source against a fake library (tests/smi/fake_rocm_smi.cpp) built with
// AMD's own rocm_smi.h: readings, processes, a GPU lost between samples, both layouts of the
// clock levels, and a library that is missing or fails to start.
#include "prism/smi/smi.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace prism::smi {
namespace {

#ifdef PRISM_FAKE_ROCM_SMI
struct FakeRocmSmi {
  explicit FakeRocmSmi(const char* script = "") {
    setenv("PRISM_ROCM_SMI_LIBRARY", PRISM_FAKE_ROCM_SMI, 1);
    setenv("FAKE_ROCM_SMI", script, 1);
  }
  ~FakeRocmSmi() {
    unsetenv("PRISM_ROCM_SMI_LIBRARY");
    unsetenv("FAKE_ROCM_SMI");
  }
};

TEST(SmiRocmSmi, ReadingsAndProcesses) {
  for (const char* script : {"", "version-6"}) {
    SCOPED_TRACE(std::string("script '") + script + "'");
    FakeRocmSmi fake(script);
    std::string absent;
    auto source = rocm_smi_source(&absent);
    ASSERT_TRUE(source) << absent;
    EXPECT_EQ(source->name(), "rocm-smi");
    std::vector<Device> d = source->sample();
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(d[0].source, "rocm-smi");
    EXPECT_EQ(d[0].name, "AMD Instinct MI300X (fake)");
    EXPECT_EQ(d[0].utilization, 0.64);
    EXPECT_EQ(d[0].memory_used, 20000000000u);
    EXPECT_EQ(d[0].memory_total, 205822885888u);
    EXPECT_EQ(d[0].temperature_c, 45.0);  // the edge sensor
    EXPECT_EQ(d[0].power_w, 301.5);
    EXPECT_EQ(d[0].clock_mhz, 2100.0);  // the current level, in the library's layout
    ASSERT_EQ(d[0].processes.size(), 2u);
    EXPECT_EQ(d[0].processes[0].pid, getpid());
    EXPECT_EQ(d[0].processes[0].name, "prism-unit-test");
    EXPECT_EQ(d[0].processes[0].memory_bytes, 6ull << 30);
    // pid 1 runs on both GPUs: shown on each, its memory (a sum over them) on neither.
    EXPECT_EQ(d[0].processes[1].pid, 1);
    EXPECT_FALSE(d[0].processes[1].memory_bytes);
    EXPECT_TRUE(d[0].errors.empty()) << d[0].errors[0];
    // GPU 1: no edge sensor (the hotspot's reading), no power reading (left out, no error).
    EXPECT_EQ(d[1].index, 1);
    EXPECT_EQ(d[1].name, "AMD Instinct MI210 (fake)");
    EXPECT_EQ(d[1].temperature_c, 38.5);
    EXPECT_FALSE(d[1].power_w);
    EXPECT_EQ(d[1].clock_mhz, 1700.0);
    ASSERT_EQ(d[1].processes.size(), 1u);
    EXPECT_EQ(d[1].processes[0].pid, 1);
    EXPECT_TRUE(d[1].errors.empty()) << d[1].errors[0];
  }
}

TEST(SmiRocmSmi, AGpuLostBetweenSamplesIsSaidAndTheOtherStays) {
  FakeRocmSmi fake("lose-gpu-1");
  auto source = rocm_smi_source();
  ASSERT_TRUE(source);
  ASSERT_EQ(source->sample().size(), 2u);
  std::vector<Device> d = source->sample();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].name, "AMD Instinct MI300X (fake)");
  EXPECT_EQ(d[0].utilization, 0.64);
  EXPECT_TRUE(d[0].errors.empty());
  EXPECT_EQ(d[1].name, "AMD GPU");
  EXPECT_FALSE(d[1].utilization);
  EXPECT_FALSE(d[1].memory_total);
  ASSERT_FALSE(d[1].errors.empty());
  EXPECT_EQ(d[1].errors[0], "name: RSMI_STATUS_NOT_FOUND: An item was searched for but not found");
}

TEST(SmiRocmSmi, AReadingThatMakesNoSenseIsSaidAndTheOthersStay) {
  FakeRocmSmi fake("bad-clock");
  auto source = rocm_smi_source();
  ASSERT_TRUE(source);
  std::vector<Device> d = source->sample();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_FALSE(d[0].clock_mhz);
  EXPECT_EQ(d[0].errors, std::vector<std::string>{"clock: current level 7 of 3"});
  EXPECT_EQ(d[0].power_w, 301.5);
  EXPECT_EQ(d[1].clock_mhz, 1700.0);
}

TEST(SmiRocmSmi, ALibraryThatFailsToStartOrIsMissingIsAbsent) {
  {
    FakeRocmSmi fake("init-fails");
    std::string absent;
    EXPECT_FALSE(rocm_smi_source(&absent));
    EXPECT_EQ(absent,
              "rocm-smi: rsmi_init failed: RSMI_STATUS_INIT_ERROR: An error occurred during "
              "initialization");
  }
  setenv("PRISM_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so.1", 1);
  std::string absent;
  EXPECT_FALSE(rocm_smi_source(&absent));
  unsetenv("PRISM_ROCM_SMI_LIBRARY");
  EXPECT_EQ(absent, "rocm-smi: /nonexistent/librocm_smi64.so.1 not found");
}
#else
TEST(SmiRocmSmi, BuiltWithoutTheHeaderTheSourceSaysSo) {
  std::string absent;
  EXPECT_FALSE(rocm_smi_source(&absent));
  EXPECT_NE(absent.find("rocm-smi: this prism was built without rocm_smi/rocm_smi.h"),
            std::string::npos);
}
#endif

}  // namespace
}  // namespace prism::smi
