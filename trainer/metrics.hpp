// Metrics as JSON lines (one object per line, rank 0 only), and small file helpers shared by
// the outputs. Lines carry at least epoch, step and loss; epoch ends add test_accuracy.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "trainer/status.hpp"

namespace accord::trainer {

// Creates dir and its missing parents (like mkdir -p).
Status make_dirs(const std::string& dir);

// Builds one JSON object: JsonLine().add("epoch", 1).add("loss", 0.25).str().
class JsonLine {
 public:
  JsonLine& add(const std::string& key, double value);
  JsonLine& add(const std::string& key, int64_t value);
  JsonLine& add(const std::string& key, int value) { return add(key, static_cast<int64_t>(value)); }
  JsonLine& add(const std::string& key, const std::string& value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& k);
  std::string body_;
};

class MetricsLog {
 public:
  MetricsLog() = default;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  ~MetricsLog();
  // append: keep earlier lines (a resumed run continues the same file).
  Status open(const std::string& path, bool append);
  Status write(const JsonLine& line);

 private:
  FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace accord::trainer
