// MNIST on the CPU: batch-1 latency and batch-256 throughput of both models, with the
// shipped weights.
#include <cstdio>

#include "bench/bench.h"
#include "prism/backends/registry.h"
#include "prism/io/load.h"
#include "prism/models/mnist.h"
#include "prism/runtime/compile.h"

namespace prism::bench {
namespace {

void mnist_bench() {
  Platform& cpu = get_platform("cpu");
  std::printf("%-5s %6s %14s %14s\n", "model", "batch", "latency (ms)", "images/s");
  for (const char* name : {"mlp", "cnn"}) {
    models::Mnist model(models::Mnist::kind_from_name(name));
    io::Store store =
        io::Store::open(std::string(PRISM_SOURCE_DIR) + "/models/mnist/" + name + ".safetensors");
    for (int64_t batch : {1, 256}) {
      Shape images(DType::u8, {{"b", batch}, {"h", 28}, {"w", 28}});
      Executable exe = compile(cpu, [&](Tensor x) { return model.forward(x); }, {images});
      io::LoadOptions quiet;
      quiet.report = false;
      io::Weights w = io::load(store, exe.parameters(), cpu, quiet);
      std::vector<Buffer> in{cpu.upload(HostBuffer(images))};
      double s = median_seconds([&] { exe.call(w, in); }, batch == 1 ? 51 : 9);
      std::printf("%-5s %6ld %14.3f %14.0f\n", name, batch, s * 1e3, batch / s);
    }
  }
}

const Register kMnist{"mnist", "MNIST batch-1 latency and batch-256 throughput", mnist_bench};

}  // namespace
}  // namespace prism::bench
