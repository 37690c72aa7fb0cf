// SHA-256 and HMAC-SHA256 (OpenSSL), for SigV4 signing and for checking downloads against
// the digests that servers publish as etags.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace prism::io {

using Sha256 = std::array<uint8_t, 32>;

Sha256 sha256(std::span<const std::byte> data);
inline Sha256 sha256(std::string_view text) { return sha256(std::as_bytes(std::span(text))); }
Sha256 hmac_sha256(std::span<const uint8_t> key, std::string_view data);
// The SHA-256 of a local file, read in pieces.
Sha256 sha256_of_file(const std::string& path);

std::string hex(std::span<const uint8_t> bytes);  // lower case

}  // namespace prism::io
