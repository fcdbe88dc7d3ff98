// JSON lines writer and mkdir -p (metrics.hpp).
#include "trainer/metrics.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>

namespace accord::trainer {

Status make_dirs(const std::string& dir) {
  if (dir.empty()) return ok_status();
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      return Status::error(partial + ": cannot create directory: " + std::strerror(errno));
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status::error(dir + ": exists and is not a directory");
  return ok_status();
}

void JsonLine::key(const std::string& k) {
  if (!body_.empty()) body_ += ",";
  body_ += "\"" + k + "\":";
}

JsonLine& JsonLine::add(const std::string& k, double value) {
  key(k);
  if (!std::isfinite(value)) {
    body_ += "null";  // JSON has no NaN or infinity
  } else {
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", value);
    body_ += b;
  }
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, int64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, const std::string& value) {
  key(k);
  body_ += "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') body_ += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    body_ += c;
  }
  body_ += "\"";
  return *this;
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

Status MetricsLog::open(const std::string& path, bool append) {
  path_ = path;
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (file_ == nullptr)
    return Status::error(path + ": cannot open metrics file: " + std::strerror(errno));
  return ok_status();
}

Status MetricsLog::write(const JsonLine& line) {
  if (file_ == nullptr) return ok_status();
  const std::string s = line.str() + "\n";
  if (std::fwrite(s.data(), 1, s.size(), file_) != s.size() || std::fflush(file_) != 0)
    return Status::error(path_ + ": writing metrics failed: " + std::strerror(errno));
  return ok_status();
}

}  // namespace accord::trainer
