// prism-bench-io: read throughput of the VFS, next to `cat` measured in the same run.
//
//   prism-bench-io [--size-mb N] [--https-size-mb M] [--repeat R]
//
// local: a file of N MiB (page cache warm) read into one host buffer through read_ranges, the
//        path a loader takes, compared with `cat FILE > /dev/null`.
// https: the same bytes (first M MiB) from nginx on 127.0.0.1 over TLS, with 1, 4 and 16
//        range reads in flight.
// Every figure is the median of R runs; ratios are between figures of this run only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "prism/io/vfs.h"
#include "test_servers.h"

namespace {

using Clock = std::chrono::steady_clock;

double median_seconds(int repeat, const std::function<void()>& fn) {
  std::vector<double> times;
  for (int i = 0; i < repeat; ++i) {
    auto start = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double gbps(uint64_t bytes, double seconds) { return static_cast<double>(bytes) / seconds / 1e9; }

void write_random_file(const std::string& path, uint64_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot create " + path);
  std::mt19937_64 rng(42);
  std::vector<uint64_t> block(1 << 17);  // 1 MiB
  for (uint64_t written = 0; written < bytes; written += block.size() * 8) {
    for (auto& v : block) v = rng();
    std::fwrite(block.data(), 1, std::min<uint64_t>(block.size() * 8, bytes - written), f);
  }
  std::fclose(f);
}

uint64_t arg(int argc, char** argv, const char* name, uint64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t size = arg(argc, argv, "--size-mb", 1024) << 20;
  uint64_t https_size = std::min(size, arg(argc, argv, "--https-size-mb", 256) << 20);
  int repeat = static_cast<int>(arg(argc, argv, "--repeat", 5));
  prism::test::TempDir dir;
  std::string path = dir.str("www/weights.bin");
  std::filesystem::create_directories(dir.path() / "www");
  write_random_file(path, size);
  std::string https_path = dir.str("www/weights-https.bin");
  std::filesystem::copy_file(path, https_path);
  std::filesystem::resize_file(https_path, https_size);

  // Local, page cache warm.
  std::string cat = "cat '" + path + "' > /dev/null";
  if (std::system(cat.c_str()) != 0) return 1;  // warms the cache
  double cat_s = median_seconds(repeat, [&] {
    if (std::system(cat.c_str()) != 0) std::exit(1);
  });
  // The destination is touched once up front (as a loader's preallocated buffer would be); the
  // file is opened afresh for every run, so each run pays for mapping it, as cat pays for
  // copying out of the page cache.
  std::vector<std::byte> buffer(size, std::byte{1});
  std::printf("local file, %llu MiB, page cache warm, median of %d\n",
              static_cast<unsigned long long>(size >> 20), repeat);
  std::printf("  %-44s %6.2f GB/s\n", "cat FILE > /dev/null", gbps(size, cat_s));
  for (int parallelism : {1, 2}) {
    double s = median_seconds(repeat, [&] {
      auto file = prism::io::open(path);
      prism::io::ReadRange range{file.get(), 0, buffer};
      prism::io::read_ranges(std::span(&range, 1), {.parallelism = parallelism});
    });
    std::printf(
        "  %-44s %6.2f GB/s  (%.2fx cat)\n",
        ("read_ranges into a host buffer, parallelism " + std::to_string(parallelism)).c_str(),
        gbps(size, s), cat_s / s);
  }
  double touch_s = median_seconds(repeat, [&] {
    auto file = prism::io::open(path);
    auto mapped = file->mapped();
    uint64_t sum = 0;
    for (size_t i = 0; i < mapped.size(); i += 4096) sum += static_cast<uint8_t>(mapped[i]);
    if (sum == 1) std::printf(" ");
  });
  std::printf("  %-44s %6.2f GB/s  (%.2fx cat)\n", "mapped(), then touch every page",
              gbps(size, touch_s), cat_s / touch_s);

  // HTTPS on loopback.
  if (!prism::test::NginxServer::available()) {
    std::printf("https: skipped (nginx is not installed)\n");
    return 0;
  }
  prism::test::NginxServer server(dir.str("www"), "", /*workers=*/2);
  setenv("CURL_CA_BUNDLE", prism::test::NginxServer::ca_file().c_str(), 1);
  auto remote = prism::io::open(server.url() + "/weights-https.bin");
  std::span<std::byte> https_buffer(buffer.data(), https_size);
  std::printf("https on 127.0.0.1 (nginx, TLS), %llu MiB, median of %d\n",
              static_cast<unsigned long long>(https_size >> 20), repeat);
  for (int parallelism : {1, 4, 16}) {
    uint64_t chunk = std::max<uint64_t>(https_size / (4 * parallelism), 1 << 20);
    prism::io::ReadRange range{remote.get(), 0, https_buffer};
    double s = median_seconds(repeat, [&] {
      prism::io::read_ranges(std::span(&range, 1),
                             {.parallelism = parallelism, .chunk_size = chunk});
    });
    std::printf("  parallelism %-2d (chunks of %3llu MiB)                %6.2f GB/s\n", parallelism,
                static_cast<unsigned long long>(chunk >> 20), gbps(https_size, s));
  }
  return 0;
}
