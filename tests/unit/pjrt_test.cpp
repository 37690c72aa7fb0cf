// The pjrt backend's own checks (its ops and models run through the op harness and the model
// tests, which compare the XLA CPU plugin with the CPU): plugins that cannot be used give one
// clear line, and the module it prints is what PRISM_DEBUG=2 shows.
#if PRISM_WITH_PJRT

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "prism/backends/pjrt/pjrt_platform.h"
#include "prism/backends/pjrt/stablehlo.h"
#include "prism/backends/registry.h"
#include "tests/unit/test_util.h"

namespace prism::pjrt {
namespace {

using testing::error_of;

std::string fake(const char* flavor) { return std::string(PRISM_FAKE_PJRT_DIR) + "/" + flavor; }

TEST(Pjrt, PluginsThatCannotBeUsedSayWhy) {
  const std::filesystem::path text = std::filesystem::temp_directory_path() / "not_a_plugin.so";
  std::ofstream(text) << "not a shared library\n";
  EXPECT_NE(error_of([&] {
              PjrtPlatform("pjrt", text.string());
            }).find("pjrt: cannot load plugin " + text.string() + ": "),
            std::string::npos);
  std::filesystem::remove(text);

  EXPECT_EQ(error_of([&] { PjrtPlatform("pjrt", fake("libfake_pjrt_no_api.so")); }),
            "pjrt: " + fake("libfake_pjrt_no_api.so") +
                " is not a PJRT plugin (it exports no GetPjrtApi)");
  EXPECT_EQ(error_of([&] { PjrtPlatform("pjrt", fake("libfake_pjrt_major_99.so")); }),
            fmt::format("pjrt: {} speaks PJRT C API 99.{}, prism was built for {}.{} (the major "
                        "versions must agree)",
                        fake("libfake_pjrt_major_99.so"), PJRT_API_MINOR, PJRT_API_MAJOR,
                        PJRT_API_MINOR));
  EXPECT_EQ(error_of([&] { PjrtPlatform("pjrt", fake("libfake_pjrt_no_devices.so")); }),
            "pjrt: the plugin " + fake("libfake_pjrt_no_devices.so") + " has no device");
}

TEST(Pjrt, PlatformsSayWhereTheyLookedForTheirPlugin) {
  const char* saved = std::getenv("PRISM_PJRT_PLUGIN");
  std::string keep = saved ? saved : "";
  unsetenv("PRISM_PJRT_PLUGIN");
  EXPECT_EQ(locate_plugin("pjrt").reason,
            "PRISM_PJRT_PLUGIN is not set (the path of a PJRT plugin)");
  setenv("PRISM_PJRT_PLUGIN", "/nonexistent/plugin.so", 1);
  EXPECT_EQ(locate_plugin("pjrt").reason, "PRISM_PJRT_PLUGIN=/nonexistent/plugin.so: no such file");
  // The shortcuts name the package to install and the environments they searched.
  if (PluginLocation tpu = locate_plugin("tpu"); tpu.path.empty()) {
    EXPECT_EQ(tpu.reason.rfind("no tpu plugin: pip install libtpu (looked in ", 0), 0u)
        << tpu.reason;
    EXPECT_NE(tpu.reason.find("/.venv"), std::string::npos) << tpu.reason;
  }
  EXPECT_EQ(locate_plugin("abacus").reason, "abacus is not a PJRT platform prism knows");
  if (saved) {
    setenv("PRISM_PJRT_PLUGIN", keep.c_str(), 1);
  } else {
    unsetenv("PRISM_PJRT_PLUGIN");
  }
}

// The shardings the module carries for the plugin's SPMD partitioner: a tile per device along
// each split dim, device ids as mesh positions, replicas along the mesh axes a tensor does not
// use.
TEST(Pjrt, HloShardingsTileTheMesh) {
  const Mesh model({{"model", 2}});
  EXPECT_EQ(hlo_sharding({-1, -1}, model), "{replicated}");
  EXPECT_EQ(hlo_sharding({}, model), "{replicated}");
  EXPECT_EQ(hlo_sharding({0, -1}, model), "{devices=[2,1]0,1}");
  EXPECT_EQ(hlo_sharding({-1, 0}, model), "{devices=[1,2]0,1}");
  const Mesh grid({{"data", 2}, {"model", 2}});  // device = 2 * data + model
  EXPECT_EQ(hlo_sharding({1, -1}, grid), "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}");
  EXPECT_EQ(hlo_sharding({0, 1}, grid), "{devices=[2,2]0,1,2,3}");
  EXPECT_EQ(hlo_sharding({1, 0}, grid), "{devices=[2,2]0,2,1,3}");
}

// Shardy's form of the same: the mesh declared once by its axes, each dim closed on the axis
// splitting it (or on none).
TEST(Pjrt, ShardyShardingsNameTheMeshAxes) {
  const Mesh grid({{"data", 2}, {"model", 4}});
  EXPECT_EQ(sdy_mesh(grid), "<[\"data\"=2, \"model\"=4]>");
  EXPECT_EQ(sdy_sharding({-1, 1}, grid), "#sdy.sharding<@mesh, [{}, {\"model\"}]>");
  EXPECT_EQ(sdy_sharding({0, 1}, grid), "#sdy.sharding<@mesh, [{\"data\"}, {\"model\"}]>");
  EXPECT_EQ(sdy_sharding({}, grid), "#sdy.sharding<@mesh, []>");

  // A module for each partitioner: Shardy's declares the mesh and annotates with it, GSPMD's
  // carries HloSharding texts; both say how many partitions.
  ir::Graph g;
  ir::ValueId x = g.add({ir::Op::input, Shape(DType::f32, {{"d", 4}}), {}, ir::InputAttrs{0}});
  g.outputs().push_back(g.add({ir::Op::add, Shape(DType::f32, {{"d", 4}}), {x, x}, {}}));
  ModuleSharding sharding{.mesh = Mesh({{"model", 2}}), .arguments = {{0}}, .results = {{-1}}};
  std::string shardy = to_stablehlo(g, {}, sharding);
  EXPECT_NE(shardy.find("mhlo.num_partitions = 2"), std::string::npos) << shardy;
  EXPECT_NE(shardy.find("sdy.mesh @mesh = <[\"model\"=2]>"), std::string::npos) << shardy;
  EXPECT_NE(shardy.find("%arg0: tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, "
                        "[{\"model\"}]>}"),
            std::string::npos)
      << shardy;
  EXPECT_NE(shardy.find("-> (tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>})"),
            std::string::npos)
      << shardy;
  EXPECT_EQ(shardy.find("mhlo.sharding"), std::string::npos) << shardy;
  sharding.partitioner = Partitioner::gspmd;
  std::string gspmd = to_stablehlo(g, {}, sharding);
  EXPECT_NE(gspmd.find("%arg0: tensor<4xf32> {mhlo.sharding = \"{devices=[2]0,1}\"}"),
            std::string::npos)
      << gspmd;
  EXPECT_NE(gspmd.find("-> (tensor<4xf32> {mhlo.sharding = \"{replicated}\"})"), std::string::npos)
      << gspmd;
  EXPECT_EQ(gspmd.find("sdy."), std::string::npos) << gspmd;
}

// Each shortcut finds its plugin where the vendor's wheel installs it, in the active virtual
// environment.
TEST(Pjrt, ShortcutsFindTheirVendorsWheel) {
  const std::filesystem::path env =
      std::filesystem::temp_directory_path() / ("prism-pjrt-env-" + std::to_string(getpid()));
  const std::filesystem::path site = env / "lib/python3.11/site-packages";
  const std::pair<const char*, const char*> layouts[] = {
      {"tpu", "libtpu/libtpu.so"},
      {"neuron", "libneuronxla/libneuronpjrt.so"},
      {"rocm", "jax_plugins/xla_rocm7/xla_rocm_plugin.so"},
      {"oneapi", "jax_plugins/intel_extension_for_openxla/pjrt_plugin_xpu.so"},
      {"xla-cuda", "jax_plugins/xla_cuda12/xla_cuda_plugin.so"},
  };
  const char* saved_env = std::getenv("VIRTUAL_ENV");
  std::string keep = saved_env ? saved_env : "";
  const char* saved_tpu = std::getenv("TPU_LIBRARY_PATH");
  std::string keep_tpu = saved_tpu ? saved_tpu : "";
  unsetenv("TPU_LIBRARY_PATH");
  setenv("VIRTUAL_ENV", env.c_str(), 1);
  for (const auto& [name, file] : layouts) {
    std::filesystem::create_directories((site / file).parent_path());
    std::ofstream(site / file) << "not loaded here";
    EXPECT_EQ(locate_plugin(name).path, (site / file).string()) << name;
  }
  std::filesystem::remove_all(env);
  if (saved_env) {
    setenv("VIRTUAL_ENV", keep.c_str(), 1);
  } else {
    unsetenv("VIRTUAL_ENV");
  }
  if (saved_tpu) setenv("TPU_LIBRARY_PATH", keep_tpu.c_str(), 1);
}

TEST(Pjrt, AModuleThePluginRejectsNamesThePrismNode) {
  bool ran = false;
  for (const PlatformStatus& s : platform_statuses()) {
    if (s.name != "xla-cpu" || !s.available) continue;
    ran = true;
    // An add whose result shape its operands do not have: verify would refuse it, the plugin's
    // StableHLO verifier does.
    ir::Graph g;
    ir::ValueId x = g.add({ir::Op::input, Shape(DType::f32, {{"d", 4}}), {}, ir::InputAttrs{0}});
    g.outputs().push_back(g.add({ir::Op::add, Shape(DType::f32, {{"d", 3}}), {x, x}, {}}));
    const std::string message = error_of([&] { get_platform("xla-cpu").compile(g, {}); });
    EXPECT_EQ(message.find("xla-cpu: compiling the program: "), 0u) << message;
    EXPECT_NE(message.find("%1 = f32{d=3} add(%0, %0)"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";
  }
  if (!ran) GTEST_SKIP() << "the XLA CPU plugin is not installed";
}

TEST(Pjrt, DonatedInputsAliasTheirOutputInTheModule) {
  ir::Graph g;
  Shape s(DType::f32, {{"d", 4}});
  ir::ValueId x = g.add({ir::Op::input, s, {}, ir::InputAttrs{0}});
  g.outputs().push_back(g.add({ir::Op::neg, s, {x}, {}}));
  const std::string module = to_stablehlo(g, {{0, 0}});
  EXPECT_NE(module.find("%arg0: tensor<4xf32> {tf.aliasing_output = 0 : i32}"), std::string::npos)
      << module;
  EXPECT_NE(module.find("\"stablehlo.negate\"(%arg0)"), std::string::npos) << module;
  EXPECT_NE(module.find("loc(\"%1 = f32{d=4} neg(%0)\")"), std::string::npos) << module;
}

}  // namespace
}  // namespace prism::pjrt

#endif  // PRISM_WITH_PJRT
