// Logging. ACCORD_LOG sets the level, globally and per category:
//   ACCORD_LOG=warn (default), ACCORD_LOG=info, ACCORD_LOG=info,topo:debug,shm:trace
// Each line starts with "[host:pid r3/8] LEVEL category". The rank tag is per thread (several
// ranks can live in one process), set by RankScope while a communicator is working.
// ACCORD_LOG_FILE sends lines to a file (%h = host, %p = pid) instead of stderr.
#pragma once

#include <cstdarg>

namespace accord {

enum class LogLevel : int { kOff = 0, kError, kWarn, kInfo, kDebug, kTrace };
enum class LogCat : int {
  kCore = 0,
  kInit,
  kBootstrap,
  kTopo,
  kShm,
  kNet,
  kGpu,
  kColl,
  kTune,
  kEnv,
  kCount
};

const char* log_cat_name(LogCat cat);

// Cheap check, safe to call on hot paths.
bool log_enabled(LogLevel level, LogCat cat);
void log_message(LogLevel level, LogCat cat, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Re-read ACCORD_LOG / ACCORD_LOG_FILE (tests).
void log_reconfigure();

// Tags log lines from this thread with "rRANK/NRANKS" while alive.
class RankScope {
 public:
  RankScope(int rank, int nranks);
  ~RankScope();
  RankScope(const RankScope&) = delete;
  RankScope& operator=(const RankScope&) = delete;

 private:
  void* tag_;  // this thread's rank tag, looked up once (a scope never changes threads)
  int saved_rank_, saved_nranks_;
};

}  // namespace accord

#define ACCORD_LOG_AT(level, cat, ...)                                         \
  do {                                                                         \
    if (::accord::log_enabled(level, cat)) ::accord::log_message(level, cat, __VA_ARGS__); \
  } while (0)
#define LOG_ERROR(cat, ...) ACCORD_LOG_AT(::accord::LogLevel::kError, ::accord::LogCat::cat, __VA_ARGS__)
#define LOG_WARN(cat, ...) ACCORD_LOG_AT(::accord::LogLevel::kWarn, ::accord::LogCat::cat, __VA_ARGS__)
#define LOG_INFO(cat, ...) ACCORD_LOG_AT(::accord::LogLevel::kInfo, ::accord::LogCat::cat, __VA_ARGS__)
#define LOG_DEBUG(cat, ...) ACCORD_LOG_AT(::accord::LogLevel::kDebug, ::accord::LogCat::cat, __VA_ARGS__)
#define LOG_TRACE(cat, ...) ACCORD_LOG_AT(::accord::LogLevel::kTrace, ::accord::LogCat::cat, __VA_ARGS__)
