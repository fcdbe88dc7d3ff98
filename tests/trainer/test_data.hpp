// Small datasets the trainer tests write themselves: IDX files (gzip-compressed or plain) and
// CIFAR-10 binary batches with an easy synthetic task (each class lights a different patch),
// so that a few training steps visibly learn. Also a scratch directory per test.
#pragma once

#include <stdlib.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace accord::trainer::testing {

// Directories made by scratch_dir() are removed when the test program exits.
struct ScratchCleanup {
  std::vector<std::string> dirs;
  ~ScratchCleanup() {
    std::error_code ec;
    for (const std::string& d : dirs) std::filesystem::remove_all(d, ec);
  }
};
inline ScratchCleanup& scratch_cleanup() {
  static ScratchCleanup c;
  return c;
}

inline std::string scratch_dir(const std::string& name) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("accord-trainer-" + name + "-XXXXXX")).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const char* d = ::mkdtemp(buf.data());
  if (d == nullptr) return std::string();
  scratch_cleanup().dirs.push_back(d);
  return d;
}

inline void put_be32(std::vector<uint8_t>* b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b->push_back(static_cast<uint8_t>(v >> s));
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
}

// Pixel value of synthetic image i (class label) at (c, y, x): a bright 6x6 patch whose place
// depends on the class, over deterministic noise.
inline uint8_t synthetic_pixel(uint32_t i, int label, int c, int y, int x, int h, int w) {
  const int py = (label / 5) * (h / 2) + 4, px = (label % 5) * (w / 5) + 1;
  const uint32_t noise = (i * 2654435761u + static_cast<uint32_t>((c * h + y) * w + x) * 40503u) >> 27;
  const bool on = y >= py && y < py + 6 && x >= px && x < px + 4;
  return static_cast<uint8_t>((on ? 180 : 20) + noise * 2);
}

// Writes train-* and t10k-* IDX files of `train` and `test` 28x28 samples into dir.
inline void write_idx_dataset(const std::string& dir, uint32_t train, uint32_t test, bool gzip) {
  for (int part = 0; part < 2; ++part) {
    const uint32_t n = part == 0 ? train : test;
    const std::string prefix = dir + (part == 0 ? "/train" : "/t10k");
    std::vector<uint8_t> img, lab;
    put_be32(&img, 0x803);
    put_be32(&img, n);
    put_be32(&img, 28);
    put_be32(&img, 28);
    put_be32(&lab, 0x801);
    put_be32(&lab, n);
    for (uint32_t i = 0; i < n; ++i) {
      const int label = static_cast<int>((i * 7 + part) % 10);
      lab.push_back(static_cast<uint8_t>(label));
      for (int y = 0; y < 28; ++y)
        for (int x = 0; x < 28; ++x) img.push_back(synthetic_pixel(i + part * 100000, label, 0, y, x, 28, 28));
    }
    const std::string gz = gzip ? ".gz" : "";
    write_bytes(prefix + "-images-idx3-ubyte" + gz, img, gzip);
    write_bytes(prefix + "-labels-idx1-ubyte" + gz, lab, gzip);
  }
}

// Writes CIFAR-10 style data_batch_1..5.bin (per_batch records each) and test_batch.bin.
inline void write_cifar_dataset(const std::string& dir, uint32_t per_batch, uint32_t test) {
  for (int b = 0; b <= 5; ++b) {
    const uint32_t n = b == 0 ? test : per_batch;
    std::vector<uint8_t> bytes;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t id = static_cast<uint32_t>(b) * 10000 + i;
      const int label = static_cast<int>(id % 10);
      bytes.push_back(static_cast<uint8_t>(label));
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < 32; ++y)
          for (int x = 0; x < 32; ++x) bytes.push_back(synthetic_pixel(id, label, c, y, x, 32, 32));
    }
    write_bytes(dir + (b == 0 ? std::string("/test_batch.bin") : "/data_batch_" + std::to_string(b) + ".bin"),
                bytes, false);
  }
}

}  // namespace accord::trainer::testing
