// Implementation of ACCORD_LOG parsing and line formatting (see log.hpp).
#include "core/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "core/status.hpp"

namespace accord {
namespace {

const char* const kCatNames[] = {"core", "init", "bootstrap", "topo", "shm",
                                 "net",  "gpu",  "coll",      "tune", "env"};
static_assert(sizeof(kCatNames) / sizeof(kCatNames[0]) == static_cast<size_t>(LogCat::kCount));

const char* const kLevelNames[] = {"OFF", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

std::atomic<int> g_levels[static_cast<int>(LogCat::kCount)];
std::atomic<bool> g_configured{false};
std::mutex g_mutex;  // guards configuration and output
FILE* g_out = nullptr;
char g_host[64] = "?";

// Not initial-exec TLS, which would save the __tls_get_addr calls: Python (ctypes) loads
// libaccord with dlopen after numpy and OpenBLAS have used up glibc's static TLS reserve, and
// the load then fails ("cannot allocate memory in static TLS block"; example_python_ctypes).
// One variable, so that RankScope looks it up once per call.
struct RankTag {
  int rank = -1;
  int nranks = 0;
};
thread_local RankTag t_rank_tag;

bool parse_level(const std::string& s, LogLevel* out) {
  static const struct {
    const char* name;
    LogLevel level;
  } kNames[] = {{"off", LogLevel::kOff},     {"none", LogLevel::kOff},   {"error", LogLevel::kError},
                {"warn", LogLevel::kWarn},   {"warning", LogLevel::kWarn}, {"info", LogLevel::kInfo},
                {"debug", LogLevel::kDebug}, {"trace", LogLevel::kTrace}};
  for (const auto& n : kNames) {
    if (strcasecmp(s.c_str(), n.name) == 0) {
      *out = n.level;
      return true;
    }
  }
  return false;
}

void configure_locked() {
  const char* spec = std::getenv("ACCORD_LOG");
  LogLevel global = LogLevel::kWarn;
  LogLevel per_cat[static_cast<int>(LogCat::kCount)];
  bool has_cat[static_cast<int>(LogCat::kCount)] = {};
  std::string bad;
  if (spec != nullptr) {
    std::string all(spec);
    size_t pos = 0;
    while (pos <= all.size()) {
      size_t comma = all.find(',', pos);
      std::string item = all.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      pos = comma == std::string::npos ? all.size() + 1 : comma + 1;
      if (item.empty()) continue;
      size_t colon = item.find(':');
      LogLevel level;
      if (colon == std::string::npos) {
        if (parse_level(item, &level)) global = level; else bad += " '" + item + "'";
        continue;
      }
      std::string cat = item.substr(0, colon);
      if (!parse_level(item.substr(colon + 1), &level)) {
        bad += " '" + item + "'";
        continue;
      }
      bool found = false;
      for (int c = 0; c < static_cast<int>(LogCat::kCount); ++c) {
        if (cat == kCatNames[c]) {
          per_cat[c] = level;
          has_cat[c] = true;
          found = true;
        }
      }
      if (!found) bad += " '" + item + "'";
    }
  }
  for (int c = 0; c < static_cast<int>(LogCat::kCount); ++c) {
    g_levels[c].store(static_cast<int>(has_cat[c] ? per_cat[c] : global), std::memory_order_relaxed);
  }
  if (gethostname(g_host, sizeof g_host) != 0) std::strcpy(g_host, "?");
  g_host[sizeof g_host - 1] = '\0';
  if (g_out != nullptr && g_out != stderr) std::fclose(g_out);
  g_out = stderr;
  if (const char* file = std::getenv("ACCORD_LOG_FILE"); file != nullptr && *file) {
    std::string path;
    for (const char* p = file; *p; ++p) {
      if (p[0] == '%' && p[1] == 'h') { path += g_host; ++p; }
      else if (p[0] == '%' && p[1] == 'p') { path += std::to_string(getpid()); ++p; }
      else path += *p;
    }
    if (FILE* f = std::fopen(path.c_str(), "a")) g_out = f;
    else std::fprintf(stderr, "accord: cannot open ACCORD_LOG_FILE '%s'; logging to stderr\n", path.c_str());
  }
  g_configured.store(true, std::memory_order_release);
  if (!bad.empty()) {
    std::fprintf(g_out,
                 "accord: ignoring unknown ACCORD_LOG item(s)%s; use levels off|error|warn|info|debug|trace "
                 "and categories core,init,bootstrap,topo,shm,net,gpu,coll,tune,env\n",
                 bad.c_str());
  }
}

void ensure_configured() {
  if (g_configured.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_configured.load(std::memory_order_relaxed)) configure_locked();
}

}  // namespace

const char* log_cat_name(LogCat cat) { return kCatNames[static_cast<int>(cat)]; }

bool log_enabled(LogLevel level, LogCat cat) {
  ensure_configured();
  return static_cast<int>(level) <= g_levels[static_cast<int>(cat)].load(std::memory_order_relaxed);
}

void log_message(LogLevel level, LogCat cat, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string body = vformat(fmt, ap);
  va_end(ap);
  char tag[48];
  const RankTag& t = t_rank_tag;
  if (t.rank >= 0) std::snprintf(tag, sizeof tag, " r%d/%d", t.rank, t.nranks);
  else tag[0] = '\0';
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(g_out, "[%s:%d%s] %s %s %s\n", g_host, static_cast<int>(getpid()), tag,
               kLevelNames[static_cast<int>(level)], kCatNames[static_cast<int>(cat)], body.c_str());
  std::fflush(g_out);
}

void log_reconfigure() {
  std::lock_guard<std::mutex> lock(g_mutex);
  configure_locked();
}

RankScope::RankScope(int rank, int nranks) {
  RankTag* t = &t_rank_tag;
  tag_ = t;
  saved_rank_ = t->rank;
  saved_nranks_ = t->nranks;
  t->rank = rank;
  t->nranks = nranks;
}

RankScope::~RankScope() {
  RankTag* t = static_cast<RankTag*>(tag_);
  t->rank = saved_rank_;
  t->nranks = saved_nranks_;
}

}  // namespace accord
