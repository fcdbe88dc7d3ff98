// SHA-256, HMAC-SHA256, a constant-time compare and random bytes from the kernel: just enough
// to authenticate bootstrap connections with the job secret (RELIABILITY.md, "Bootstrap").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "core/status.hpp"

namespace accord {

using Digest = std::array<uint8_t, 32>;

Digest sha256(const void* data, size_t bytes);
Digest hmac_sha256(const void* key, size_t key_bytes, const void* msg, size_t msg_bytes);

// True if equal; time depends only on `bytes`, not on where they differ.
bool constant_time_equal(const void* a, const void* b, size_t bytes);

// Cryptographically random bytes (getrandom).
Status random_bytes(void* out, size_t bytes);

// Lower-case hex of `bytes` bytes.
std::string to_hex(const void* data, size_t bytes);
// The reverse: false (out unspecified) unless `hex` is exactly 2 * bytes lower-case digits.
bool from_hex(const std::string& hex, void* out, size_t bytes);

}  // namespace accord
