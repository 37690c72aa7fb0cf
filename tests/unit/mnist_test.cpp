// The MNIST smoke test end to end, through the `prism` binary as a user runs it: accuracy on
// the held-out set, a single digit, loading over HTTPS, and clear errors for bad weights.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "prism/io/safetensors.h"
#include "tests/unit/io_test_util.h"
#include "tests/unit/test_servers.h"
#include "tests/unit/test_util.h"

namespace prism {
namespace {

struct Result {
  int status = -1;
  std::string out;  // stdout and stderr together
};

Result prism_cli(const std::string& args) {
  std::string cmd = std::string(PRISM_BIN_DIR) + "/prism " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

double accuracy_of(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"(accuracy: ([0-9.]+) \((\d+)/(\d+)\))"))) return -1;
  return std::stod(m[1]);
}

std::string models_dir() { return std::string(PRISM_SOURCE_DIR) + "/models/mnist"; }

TEST(Mnist, MlpAccuracyOnTheHeldOutSet) {
  Result r = prism_cli("mnist --eval --model=mlp");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_GE(accuracy_of(r.out), 0.95) << r.out;
  EXPECT_NE(r.out.find("(1911/2000)"), std::string::npos) << "PyTorch gets 1911: " << r.out;
}

TEST(Mnist, CnnAccuracyOnTheHeldOutSet) {
  Result r = prism_cli("mnist --eval --model=cnn");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_GE(accuracy_of(r.out), 0.97) << r.out;
  EXPECT_NE(r.out.find("(1964/2000)"), std::string::npos) << "PyTorch gets 1964: " << r.out;
}

TEST(Mnist, SamePredictionsOnEveryPlatform) {
  Result info = prism_cli("info");
  ASSERT_EQ(info.status, 0);
  std::smatch m;
  std::string text = info.out;
  std::regex available(R"(\n  (\S+)\s+available)");
  std::string cpu = prism_cli("mnist --eval --model=cnn --platform=cpu").out;
  int platforms = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), available);
       it != std::sregex_iterator(); ++it, ++platforms) {
    std::string name = (*it)[1];
    std::string out = prism_cli("mnist --eval --model=cnn --platform=" + name).out;
    EXPECT_EQ(accuracy_of(out), accuracy_of(cpu)) << name << ": " << out;
  }
  EXPECT_GE(platforms, 1);
}

TEST(Mnist, RecognizesOneDigit) {
  Result r = prism_cli("mnist --index=3");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("RECOGNIZED DIGIT: 3 (probability 0.99"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("label: 3"), std::string::npos) << r.out;
  Result seeded = prism_cli("mnist --seed=7"), again = prism_cli("mnist --seed=7");
  EXPECT_EQ(seeded.out.substr(0, seeded.out.find("model ")),
            again.out.substr(0, again.out.find("model ")));
}

TEST(Mnist, LoadsWeightsOverHttps) {
  if (!test::NginxServer::available()) GTEST_SKIP() << "nginx is not installed";
  test::NginxServer server(models_dir());
  std::string cmd = "mnist --eval --weights=" + server.url() + "/mlp.safetensors";
  Result r;
  {
    test::ScopedEnv ca("CURL_CA_BUNDLE", test::NginxServer::ca_file());
    r = prism_cli(cmd);
  }
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("(1911/2000)"), std::string::npos) << r.out;
}

TEST(Mnist, BadWeightsGiveOneClearError) {
  test::TempDir dir;
  // Truncated: the header promises more bytes than the file has.
  std::ifstream in(models_dir() + "/mlp.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  test::write_bytes(dir.str("truncated.safetensors"), bytes.substr(0, bytes.size() / 2));
  Result r = prism_cli("mnist --index=0 --weights=" + dir.str("truncated.safetensors"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find("prism: error: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("truncated.safetensors"), std::string::npos) << r.out;

  // Wrong shapes: a hidden layer of 128 instead of 256.
  std::vector<float> w1(128 * 784), b1(128), w2(10 * 128), b2(10);
  auto entry = [](const char* name, const std::vector<float>& v, std::vector<int64_t> shape) {
    return io::SafetensorsEntry{name, io::SafetensorsDType::F32, std::move(shape),
                                std::as_bytes(std::span(v))};
  };
  std::vector<io::SafetensorsEntry> entries{
      entry("fc1.weight", w1, {128, 784}), entry("fc1.bias", b1, {128}),
      entry("fc2.weight", w2, {10, 128}), entry("fc2.bias", b2, {10})};
  io::write_safetensors(dir.str("small.safetensors"), entries);
  r = prism_cli("mnist --index=0 --weights=" + dir.str("small.safetensors"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find("tensor \"fc1.weight\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("F32[128, 784] but the model expects f32{hidden=256,pixels=784}"),
            std::string::npos)
      << r.out;

  // A missing tensor, an unknown model, an index out of range.
  r = prism_cli("mnist --index=0 --model=cnn --weights=" + dir.str("small.safetensors"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("conv1"), std::string::npos) << r.out;
  r = prism_cli("mnist --model=resnet");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("unknown model 'resnet' (expected mlp or cnn)"), std::string::npos);
  r = prism_cli("mnist --index=2000");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("--index=2000 is out of range (the set holds 2000 images)"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace prism
