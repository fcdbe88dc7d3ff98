// CRC-32C (Castagnoli): TFRecord framing of TensorBoard event files uses it (masked), and
// checkpoints end with one so that a damaged file is refused instead of loaded.
#pragma once

#include <cstddef>
#include <cstdint>

namespace accord::trainer {

uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);
// TFRecord's mask: rotate right by 15 and add a constant.
inline uint32_t masked_crc32c(const void* data, size_t bytes) {
  const uint32_t c = crc32c(data, bytes);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

}  // namespace accord::trainer
