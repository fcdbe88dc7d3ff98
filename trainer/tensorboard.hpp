// TensorBoard scalars without TensorFlow: an event file of TFRecord-framed Event protobufs,
// encoded by hand (research/ecosystem.md section 5).
//
//   record  = u64 length | u32 masked_crc32c(length) | payload | u32 masked_crc32c(payload)
//   Event   = wall_time (1, double) | step (2, varint) | file_version (3) or summary (5)
//   Summary = repeated value (1) ; Value = tag (1, string) | simple_value (2, float)
//
// The first record is file_version "brain.Event:2"; TensorBoard shows simple_value scalars on
// its Scalars dashboard. Only rank 0 writes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "trainer/status.hpp"

namespace accord::trainer {

std::string encode_file_version_event(double wall_time);
std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag, float value);
std::string frame_record(const std::string& payload);

class EventWriter {
 public:
  EventWriter() = default;
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;
  ~EventWriter();

  // Creates dir if needed and a new events.out.tfevents.<seconds>.<host>.<pid> file in it.
  Status open(const std::string& dir);
  bool is_open() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  // Appends one scalar and flushes (a crash loses nothing already logged).
  Status scalar(const std::string& tag, float value, int64_t step);

 private:
  Status write(const std::string& payload);
  FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace accord::trainer
