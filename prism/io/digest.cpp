#include "prism/io/digest.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "prism/core/error.h"

namespace prism::io {
namespace {

struct DigestContextDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

Sha256 sha256(std::span<const std::byte> data) {
  Sha256 out{};
  unsigned int len = 0;
  if (!EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr)) {
    fail("sha256: OpenSSL EVP_Digest failed");
  }
  return out;
}

Sha256 hmac_sha256(std::span<const uint8_t> key, std::string_view data) {
  Sha256 out{};
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &len)) {
    fail("hmac_sha256: OpenSSL HMAC failed");
  }
  return out;
}

Sha256 sha256_of_file(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, DigestContextDeleter> ctx(EVP_MD_CTX_new());
  if (!ctx || !EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr)) fail("sha256: init failed");
  std::vector<char> buffer(4 << 20);
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0) {
    EVP_DigestUpdate(ctx.get(), buffer.data(), n);
  }
  if (std::ferror(file.get())) fail("{}: read failed", path);
  Sha256 out{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), out.data(), &len);
  return out;
}

std::string hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

}  // namespace prism::io
