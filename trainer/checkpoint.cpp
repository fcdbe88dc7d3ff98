// Checkpoint file format (version 1, little-endian):
//   "ACCTRAIN" | u32 version | str model | str dataset | u64 seed | i64 step | i64 epoch |
//   i64 step_in_epoch | i64 global_batch | u64 count | f32[count] x 4 (params, m, v, ema) |
//   u32 crc32c of everything before it
// where str is u32 length + bytes.
#include "trainer/checkpoint.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "trainer/crc32c.hpp"

namespace accord::trainer {

namespace {

constexpr char kMagic[8] = {'A', 'C', 'C', 'T', 'R', 'A', 'I', 'N'};
constexpr uint32_t kVersion = 1;

void put(std::vector<uint8_t>* b, const void* p, size_t n) {
  const auto* c = static_cast<const uint8_t*>(p);
  b->insert(b->end(), c, c + n);
}
template <typename T>
void put_value(std::vector<uint8_t>* b, T v) {
  put(b, &v, sizeof v);
}
void put_string(std::vector<uint8_t>* b, const std::string& s) {
  put_value<uint32_t>(b, static_cast<uint32_t>(s.size()));
  put(b, s.data(), s.size());
}

class Reader {
 public:
  Reader(const std::vector<uint8_t>& b, size_t end) : b_(b), end_(end) {}
  bool get(void* p, size_t n) {
    if (pos_ + n > end_) return false;
    std::memcpy(p, b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool value(T* v) {
    return get(v, sizeof *v);
  }
  bool string(std::string* s) {
    uint32_t n = 0;
    if (!value(&n) || n > 256 || pos_ + n > end_) return false;
    s->assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool floats(std::vector<float>* v, uint64_t n) {
    if (n > (end_ - pos_) / sizeof(float)) return false;
    v->resize(n);
    return get(v->data(), n * sizeof(float));
  }
  size_t pos() const { return pos_; }

 private:
  const std::vector<uint8_t>& b_;
  size_t end_;
  size_t pos_ = 0;
};

}  // namespace

std::string checkpoint_path(const std::string& dir) { return dir + "/checkpoint.bin"; }

Status save_checkpoint(const std::string& path, const TrainState& s) {
  std::vector<uint8_t> b;
  b.reserve(64 + 16 * s.params.size());
  put(&b, kMagic, sizeof kMagic);
  put_value(&b, kVersion);
  put_string(&b, s.model);
  put_string(&b, s.dataset);
  put_value(&b, s.seed);
  put_value(&b, s.step);
  put_value(&b, s.epoch);
  put_value(&b, s.step_in_epoch);
  put_value(&b, s.global_batch);
  put_value<uint64_t>(&b, s.params.size());
  for (const std::vector<float>* v : {&s.params, &s.m, &s.v, &s.ema}) {
    if (v->size() != s.params.size())
      return Status::error(path + ": internal error: optimizer state and parameters differ in size");
    put(&b, v->data(), v->size() * sizeof(float));
  }
  put_value(&b, crc32c(b.data(), b.size()));

  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr)
    return Status::error(tmp + ": cannot create checkpoint: " + std::strerror(errno) +
                         " (does the --checkpoint directory exist and is it writable?)");
  const bool wrote = std::fwrite(b.data(), 1, b.size(), f) == b.size();
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    std::remove(tmp.c_str());
    return Status::error(tmp + ": writing the checkpoint failed: " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return Status::error(path + ": cannot rename " + tmp + " into place: " + std::strerror(errno));
  return ok_status();
}

Status load_checkpoint(const std::string& path, TrainState* s) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status::error(path + ": cannot open checkpoint: " + std::strerror(errno));
  std::vector<uint8_t> b;
  uint8_t chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) b.insert(b.end(), chunk, chunk + n);
  std::fclose(f);
  if (b.size() < sizeof kMagic + 8 || std::memcmp(b.data(), kMagic, sizeof kMagic) != 0)
    return Status::error(path + ": not an accord-train checkpoint (bad magic)");
  uint32_t stored_crc;
  std::memcpy(&stored_crc, b.data() + b.size() - 4, 4);
  if (crc32c(b.data(), b.size() - 4) != stored_crc)
    return Status::error(path + ": checkpoint is damaged (CRC-32C mismatch); delete it to start over");
  Reader r(b, b.size() - 4);
  char magic[8];
  uint32_t version = 0;
  uint64_t count = 0;
  if (!r.get(magic, 8) || !r.value(&version))
    return Status::error(path + ": checkpoint header is truncated");
  if (version != kVersion)
    return Status::error(path + ": checkpoint version " + std::to_string(version) +
                         " (this program reads version " + std::to_string(kVersion) + ")");
  if (!r.string(&s->model) || !r.string(&s->dataset) || !r.value(&s->seed) || !r.value(&s->step) ||
      !r.value(&s->epoch) || !r.value(&s->step_in_epoch) || !r.value(&s->global_batch) ||
      !r.value(&count) || !r.floats(&s->params, count) || !r.floats(&s->m, count) ||
      !r.floats(&s->v, count) || !r.floats(&s->ema, count) || r.pos() != b.size() - 4)
    return Status::error(path + ": checkpoint is truncated or has the wrong layout");
  return ok_status();
}

}  // namespace accord::trainer
