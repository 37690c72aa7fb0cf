// prism-conformance: runs the ONNX node tests (Debian's libonnx-testdata) against prism's ops.
//
//   prism-conformance [--platform=NAME] [--data=DIR] [--filter=SUBSTR] [--verbose]
//                     [--min-passed=N]
//
// Prints one summary line per platform, "onnx-node [cpu]: P passed, F failed, S skipped". Exits
// non-zero when a case fails or fewer than N pass. --verbose lists every skipped case with its
// reason and every failure with its first mismatch; --trace prints every node's outputs as it runs.
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "prism/backends/registry.h"
#include "prism/core/error.h"
#include "tests/conformance/node_context.h"
#include "tests/conformance/runner.h"

namespace {

constexpr std::string_view kDefaultData = "/usr/share/libonnx-testdata/data/node";

struct Options {
  std::string data{kDefaultData};
  std::string filter;
  std::string platform = "cpu";
  bool verbose = false;
  bool trace = false;
  long min_passed = 0;
};

bool parse_args(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    auto value = [&](std::string_view flag) -> std::optional<std::string> {
      if (arg.starts_with(flag) && arg.size() > flag.size() && arg[flag.size()] == '=') {
        return std::string(arg.substr(flag.size() + 1));
      }
      return std::nullopt;
    };
    if (arg == "--verbose" || arg == "-v") {
      o.verbose = true;
    } else if (arg == "--trace") {
      o.trace = true;
    } else if (auto v = value("--data")) {
      o.data = *v;
    } else if (auto v = value("--platform")) {
      o.platform = *v;
    } else if (auto v = value("--filter")) {
      o.filter = *v;
    } else if (auto v = value("--min-passed")) {
      o.min_passed = std::stol(*v);
    } else if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: prism-conformance [--platform=cpu|opencl|...] [--data=DIR] [--filter=SUBSTR] "
          "[--verbose] [--min-passed=N]\n");
      std::exit(0);
    } else {
      std::fprintf(stderr, "prism-conformance: unknown argument %s\n", argv[i]);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using prism::conformance::CaseResult;
  Options options;
  if (!parse_args(argc, argv, options)) return 2;
  if (!fs::is_directory(options.data)) {
    std::fprintf(stderr,
                 "prism-conformance: no ONNX node tests at %s (install Debian's libonnx-testdata, "
                 "as scripts/setup.sh does, or pass --data=DIR)\n",
                 options.data.c_str());
    return 2;
  }
  prism::Platform* platform = nullptr;
  try {
    platform = &prism::get_platform(options.platform);
  } catch (const prism::Error& e) {
    std::fprintf(stderr, "prism-conformance: %s\n", e.what());
    return 2;
  }
  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(options.data)) {
    std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.find(options.filter) != std::string::npos) {
      cases.push_back(entry.path());
    }
  }
  std::sort(cases.begin(), cases.end());

  long passed = 0, failed = 0, skipped = 0;
  for (const fs::path& dir : cases) {
    std::string name = dir.filename().string();
    CaseResult r;
    try {
      r = prism::conformance::run_case(dir.string(), *platform, options.trace);
    } catch (const prism::conformance::Unsupported& e) {
      r = {CaseResult::Status::skipped, e.what()};
    } catch (const std::exception& e) {
      r = {CaseResult::Status::failed, e.what()};
    }
    switch (r.status) {
      case CaseResult::Status::passed:
        ++passed;
        break;
      case CaseResult::Status::failed:
        ++failed;
        if (options.verbose) std::printf("FAIL %s: %s\n", name.c_str(), r.detail.c_str());
        break;
      case CaseResult::Status::skipped:
        ++skipped;
        if (options.verbose) std::printf("SKIP %s: %s\n", name.c_str(), r.detail.c_str());
        break;
    }
  }
  std::printf("onnx-node [%s]: %ld passed, %ld failed, %ld skipped\n",
              std::string(platform->name()).c_str(), passed, failed, skipped);
  if (failed > 0) return 1;
  if (passed < options.min_passed) {
    std::fprintf(stderr, "prism-conformance: %ld passed, fewer than the required %ld\n", passed,
                 options.min_passed);
    return 1;
  }
  return 0;
}
