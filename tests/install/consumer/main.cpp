// Compiles y = x * 2 + 1 over a tagged dimension for the CPU, runs it, and prints the result
// and the platforms this prism offers: what a program built against the installed library
// (find_package(prism) or pkg-config) can do.
#include <cstdio>
#include <exception>
#include <vector>

#include "prism/backends/registry.h"
#include "prism/core/error.h"
#include "prism/runtime/compile.h"

int main() {
  using namespace prism;
  try {
    const Shape row(DType::f32, {{"d", 4}});
    Platform& cpu = get_platform("cpu");
    Executable exe = compile(cpu, [](Tensor x) { return x * 2.0f + 1.0f; }, {row});
    Buffer in = cpu.upload(HostBuffer::from<float>(row, {0, 1, 2, 3}));
    const std::vector<double> y =
        exe.call(std::span<const Buffer>{}, std::span(&in, 1))[0].to_host().to_f64();
    for (double v : y) std::printf("%g ", v);
    std::printf("\n");
    // A mistake is an exception with one clear line.
    try {
      get_platform("no-such-platform");
    } catch (const Error& e) {
      std::printf("error: %s\n", e.what());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
  return 0;
}
