// Hand-written protobuf encoding of the few Event fields TensorBoard needs (tensorboard.hpp).
#include "trainer/tensorboard.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "trainer/crc32c.hpp"
#include "trainer/metrics.hpp"

namespace accord::trainer {

namespace {

void varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

template <typename T>
void fixed(std::string* out, T v) {  // little-endian on the hosts we build for
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

void length_delimited(std::string* out, int field, const std::string& bytes) {
  varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  varint(out, bytes.size());
  out->append(bytes);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string encode_file_version_event(double wall_time) {
  std::string e;
  e.push_back(0x09);
  fixed(&e, wall_time);
  length_delimited(&e, 3, "brain.Event:2");
  return e;
}

std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag,
                                float value) {
  std::string v;
  length_delimited(&v, 1, tag);
  v.push_back(0x15);
  fixed(&v, value);
  std::string summary;
  length_delimited(&summary, 1, v);
  std::string e;
  e.push_back(0x09);
  fixed(&e, wall_time);
  e.push_back(0x10);
  varint(&e, static_cast<uint64_t>(step));
  length_delimited(&e, 5, summary);
  return e;
}

std::string frame_record(const std::string& payload) {
  std::string r;
  const uint64_t n = payload.size();
  fixed(&r, n);
  fixed(&r, masked_crc32c(&n, sizeof n));
  r += payload;
  fixed(&r, masked_crc32c(payload.data(), payload.size()));
  return r;
}

EventWriter::~EventWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Status EventWriter::open(const std::string& dir) {
  TRAINER_TRY(make_dirs(dir));
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  char name[512];
  std::snprintf(name, sizeof name, "/events.out.tfevents.%010lld.%s.%d",
                static_cast<long long>(now_seconds()), host, static_cast<int>(::getpid()));
  path_ = dir + name;
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr)
    return Status::error(path_ + ": cannot create TensorBoard event file: " + std::strerror(errno));
  return write(encode_file_version_event(now_seconds()));
}

Status EventWriter::scalar(const std::string& tag, float value, int64_t step) {
  return write(encode_scalar_event(now_seconds(), step, tag, value));
}

Status EventWriter::write(const std::string& payload) {
  if (file_ == nullptr) return ok_status();
  const std::string r = frame_record(payload);
  if (std::fwrite(r.data(), 1, r.size(), file_) != r.size() || std::fflush(file_) != 0)
    return Status::error(path_ + ": writing TensorBoard event failed: " + std::strerror(errno));
  return ok_status();
}

}  // namespace accord::trainer
