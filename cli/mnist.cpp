// `prism mnist`: the smoke test of the whole path. The model is traced and compiled for the
// chosen platform, its weights stream in through the VFS, and one held-out digit (or, with
// --eval, all of them) is recognized.
#include "prism/models/mnist.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>

#include "cli/command.h"
#include "prism/backends/registry.h"
#include "prism/core/error.h"
#include "prism/io/idx.h"
#include "prism/io/load.h"
#include "prism/runtime/compile.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "mlp";
  std::string weights;  // default: the shipped models/mnist/<model>.safetensors
  std::string images;
  std::string labels;
  std::string platform;
  int64_t index = -1;
  uint64_t seed = 0;
  bool seeded = false;
  bool eval = false;
  int64_t batch = 256;
};

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void print_digit(const uint8_t* pixels) {
  static const char* shades = " .:-=+*#%@";
  for (int y = 0; y < 28; ++y) {
    std::string row;
    for (int x = 0; x < 28; ++x) row += std::string(2, shades[pixels[y * 28 + x] * 9 / 255]);
    std::printf("%s\n", row.c_str());
  }
}

int run(const Options& o) {
  const std::string dir = std::string(PRISM_SOURCE_DIR) + "/models/mnist/";
  std::string weights = o.weights.empty() ? dir + o.model + ".safetensors" : o.weights;
  std::string images_uri = o.images.empty() ? dir + "test-images-idx3-ubyte" : o.images;
  std::string labels_uri = o.labels.empty() ? dir + "test-labels-idx1-ubyte" : o.labels;
  PRISM_CHECK(o.batch >= 1, "mnist: --batch must be at least 1, got {}", o.batch);

  prism::HostBuffer images = prism::io::read_idx_u8(images_uri, {"b", "h", "w"});
  prism::HostBuffer labels = prism::io::read_idx_u8(labels_uri, {"b"});
  int64_t count = images.shape().size(0);
  PRISM_CHECK(images.shape().size(1) == 28 && images.shape().size(2) == 28,
              "mnist: {} holds {} images, expected 28x28", images_uri, images.shape().dims_str());
  PRISM_CHECK(labels.numel() == count, "mnist: {} has {} labels for {} images", labels_uri,
              labels.numel(), count);
  PRISM_CHECK(count > 0, "mnist: {} holds no images", images_uri);

  prism::Platform& platform = prism::get_platform(o.platform);
  prism::models::Mnist model(prism::models::Mnist::kind_from_name(o.model));
  int64_t batch = o.eval ? std::min(o.batch, count) : 1;
  auto t0 = Clock::now();
  prism::Executable exe =
      prism::compile(platform, [&](prism::Tensor x) { return model.forward(x); },
                     {prism::Shape(prism::DType::u8, {{"b", batch}, {"h", 28}, {"w", 28}})});
  double compile_ms = ms_since(t0);
  t0 = Clock::now();
  prism::io::LoadOptions load_options;
  load_options.report = false;
  prism::io::Weights w =
      prism::io::load(prism::io::Store::open(weights), exe.parameters(), platform, load_options);
  double load_ms = ms_since(t0);

  const uint8_t* px = images.as<uint8_t>().data();
  const uint8_t* lb = labels.as<uint8_t>().data();
  if (!o.eval) {
    int64_t index = o.index;
    if (index < 0) {
      std::mt19937_64 rng(o.seeded ? o.seed : std::random_device{}());
      index = static_cast<int64_t>(rng() % static_cast<uint64_t>(count));
    }
    PRISM_CHECK(index < count, "mnist: --index={} is out of range (the set holds {} images)", index,
                count);
    prism::HostBuffer one(prism::Shape(prism::DType::u8, {{"b", 1}, {"h", 28}, {"w", 28}}),
                          std::span(images.bytes().data() + index * 784, 784));
    t0 = Clock::now();
    std::vector<prism::Buffer> in{platform.upload(one)};
    prism::HostBuffer probs = exe.call(w, in)[0].to_host();
    double infer_ms = ms_since(t0);
    auto p = probs.as<float>();
    int best = static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
    std::printf("held-out digit #%ld:\n", index);
    print_digit(px + index * 784);
    std::printf("RECOGNIZED DIGIT: %d (probability %.3f) · label: %d\n", best, p[best], lb[index]);
    std::printf("model %s on %s · compile %.1f ms · load %.1f ms · inference %.2f ms\n",
                o.model.c_str(), std::string(platform.name()).c_str(), compile_ms, load_ms,
                infer_ms);
    return 0;
  }

  // Full batches with `exe`, then the remainder with an executable of its own size.
  int64_t rest = count % batch;
  std::optional<prism::Executable> tail;
  if (rest > 0) {
    tail = prism::compile(platform, [&](prism::Tensor x) { return model.forward(x); },
                          {prism::Shape(prism::DType::u8, {{"b", rest}, {"h", 28}, {"w", 28}})});
  }
  int64_t correct = 0;
  t0 = Clock::now();
  for (int64_t start = 0; start < count; start += batch) {
    int64_t n = std::min(batch, count - start);
    prism::HostBuffer chunk(prism::Shape(prism::DType::u8, {{"b", n}, {"h", 28}, {"w", 28}}),
                            std::span(images.bytes().data() + start * 784, n * 784));
    std::vector<prism::Buffer> in{platform.upload(chunk)};
    prism::HostBuffer probs = (n == batch ? exe : *tail).call(w, in)[0].to_host();
    auto p = probs.as<float>();
    for (int64_t i = 0; i < n; ++i) {
      auto row = p.subspan(i * 10, 10);
      int best = static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
      correct += best == lb[start + i];
    }
  }
  double seconds = ms_since(t0) / 1e3;
  std::printf("accuracy: %.4f (%ld/%ld)\n", double(correct) / count, correct, count);
  std::printf("model %s on %s · batch %ld · %.0f images/s · compile %.1f ms · load %.1f ms\n",
              o.model.c_str(), std::string(platform.name()).c_str(), batch, count / seconds,
              compile_ms, load_ms);
  return 0;
}

const prism::cli::RegisterCommand kMnist{
    "mnist", "Recognize a held-out MNIST digit (or evaluate them all with --eval)",
    [](CLI::App& app) -> prism::cli::Action {
      auto o = std::make_shared<Options>();
      app.add_option("--model", o->model, "mlp or cnn")->capture_default_str();
      app.add_option("--weights", o->weights, "weights URI (file, https://, hf://, s3://)");
      app.add_option("--images", o->images, "held-out images, idx format (any URI)");
      app.add_option("--labels", o->labels, "their labels, idx format (any URI)");
      app.add_option("--index", o->index, "which held-out digit (default: random)");
      app.add_option("--seed", o->seed, "seed for the random pick")->each([o](const std::string&) {
        o->seeded = true;
      });
      app.add_option("--platform", o->platform, "cpu, opencl, cuda, auto (default: auto)");
      app.add_flag("--eval", o->eval, "evaluate the whole held-out set");
      app.add_option("--batch", o->batch, "batch size for --eval")->capture_default_str();
      return [o] { return run(*o); };
    }};

}  // namespace
