// A small reader of TensorBoard event files for the tests: TFRecord framing with both CRCs
// checked, then the Event fields the trainer writes (step, file_version, scalar summaries).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "trainer/crc32c.hpp"

namespace accord::trainer::testing {

// A minimal reader: TFRecord framing with CRC checks, then the Event fields we write.
struct Scalar {
  int64_t step;
  std::string tag;
  float value;
};

inline bool read_varint(const std::string& b, size_t* p, uint64_t* v) {
  *v = 0;
  for (int shift = 0; *p < b.size() && shift < 64; shift += 7) {
    const uint8_t c = static_cast<uint8_t>(b[(*p)++]);
    *v |= static_cast<uint64_t>(c & 0x7F) << shift;
    if (!(c & 0x80)) return true;
  }
  return false;
}

// Returns the fields of one message: (field number, wire type, bytes or value).
struct Field {
  int number, wire;
  uint64_t value;
  std::string bytes;
};
inline std::vector<Field> parse(const std::string& b) {
  std::vector<Field> out;
  size_t p = 0;
  while (p < b.size()) {
    uint64_t key = 0;
    EXPECT_TRUE(read_varint(b, &p, &key));
    Field f{static_cast<int>(key >> 3), static_cast<int>(key & 7), 0, {}};
    if (f.wire == 0) {
      read_varint(b, &p, &f.value);
    } else if (f.wire == 1 || f.wire == 5) {
      const size_t n = f.wire == 1 ? 8 : 4;
      f.bytes = b.substr(p, n);
      p += n;
    } else if (f.wire == 2) {
      uint64_t n = 0;
      read_varint(b, &p, &n);
      f.bytes = b.substr(p, n);
      p += n;
    } else {
      ADD_FAILURE() << "unexpected wire type " << f.wire;
      break;
    }
    out.push_back(f);
  }
  return out;
}

inline std::vector<Scalar> read_events(const std::string& path, std::string* file_version) {
  std::ifstream f(path, std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(f)), {});
  std::vector<Scalar> out;
  size_t p = 0;
  while (p + 12 <= all.size()) {
    uint64_t n;
    uint32_t len_crc, data_crc;
    std::memcpy(&n, all.data() + p, 8);
    std::memcpy(&len_crc, all.data() + p + 8, 4);
    EXPECT_EQ(len_crc, masked_crc32c(all.data() + p, 8));
    const std::string payload = all.substr(p + 12, n);
    std::memcpy(&data_crc, all.data() + p + 12 + n, 4);
    EXPECT_EQ(data_crc, masked_crc32c(payload.data(), payload.size()));
    p += 12 + n + 4;
    Scalar s{0, "", 0};
    bool is_scalar = false;
    for (const Field& e : parse(payload)) {
      if (e.number == 2) s.step = static_cast<int64_t>(e.value);
      if (e.number == 3) *file_version = e.bytes;
      if (e.number != 5) continue;
      for (const Field& v : parse(e.bytes))        // Summary.value
        for (const Field& x : parse(v.bytes)) {  // Value fields
          if (x.number == 1) s.tag = x.bytes;
          if (x.number == 2) std::memcpy(&s.value, x.bytes.data(), 4), is_scalar = true;
        }
    }
    if (is_scalar) out.push_back(s);
  }
  EXPECT_EQ(p, all.size()) << "trailing bytes in " << path;
  return out;
}

}  // namespace accord::trainer::testing
