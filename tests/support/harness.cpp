// Ranks as threads or forked processes, and exact test data (see harness.hpp).
#include "tests/support/harness.hpp"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

namespace accord::testing {

std::function<std::string()> g_after_destroy;

void set_after_destroy(std::function<std::string()> check) { g_after_destroy = std::move(check); }

namespace {

std::string run_one(const accord_unique_id_t& id, int rank, int nranks, const RankBody& body) {
  accord_comm_t comm = nullptr;
  accord_status_t s = accord_comm_init_rank(&comm, nranks, id, rank);
  if (s != ACCORD_SUCCESS) return std::string("init failed: ") + accord_last_error(nullptr);
  std::string msg = body(comm, rank, nranks);
  if (accord_comm_destroy(comm) != ACCORD_SUCCESS && msg.empty()) msg = "destroy failed";
  if (g_after_destroy && msg.empty()) msg = g_after_destroy();
  return msg;
}

std::mutex rank_pids_mu;
std::vector<pid_t> rank_pids;

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

template <typename T>
void put(void* buf, size_t i, T v) {
  std::memcpy(static_cast<char*>(buf) + i * sizeof(T), &v, sizeof(T));  // buffers may be unaligned
}

void store(void* buf, size_t i, accord_datatype_t d, double v) {
  switch (d) {
    case ACCORD_INT8: put(buf, i, static_cast<int8_t>(v)); break;
    case ACCORD_UINT8: put(buf, i, static_cast<uint8_t>(v)); break;
    case ACCORD_INT32: put(buf, i, static_cast<int32_t>(v)); break;
    case ACCORD_UINT32: put(buf, i, static_cast<uint32_t>(v)); break;
    case ACCORD_INT64: put(buf, i, static_cast<int64_t>(v)); break;
    case ACCORD_UINT64: put(buf, i, static_cast<uint64_t>(v)); break;
    case ACCORD_FLOAT16: put(buf, i, static_cast<_Float16>(static_cast<float>(v))); break;
    case ACCORD_BFLOAT16: put(buf, i, to_bf16(static_cast<float>(v))); break;
    case ACCORD_FLOAT32: put(buf, i, static_cast<float>(v)); break;
    case ACCORD_FLOAT64: put(buf, i, v); break;
    default: break;
  }
}

bool is_signed(accord_datatype_t d) {
  return d != ACCORD_UINT8 && d != ACCORD_UINT32 && d != ACCORD_UINT64;
}
bool is_float(accord_datatype_t d) {
  return d == ACCORD_FLOAT16 || d == ACCORD_BFLOAT16 || d == ACCORD_FLOAT32 || d == ACCORD_FLOAT64;
}

// Small integers: sums of up to ~20 ranks fit int8; products use {-1, 1, 2} (or {1, 2}).
double value_for(accord_datatype_t d, accord_red_op_t op, int rank, size_t i, size_t seed) {
  size_t h = (static_cast<size_t>(rank) + 1) * 2654435761u + i * 40503u + seed * 97u;
  h ^= h >> 13;
  if (op == ACCORD_PROD) {
    int k = static_cast<int>(h % 3);
    if (!is_signed(d)) return k == 0 ? 2 : 1;
    return k == 0 ? 2 : (k == 1 ? 1 : -1);
  }
  int v = static_cast<int>(h % 11);
  return is_signed(d) ? v - 5 : v;
}

}  // namespace

std::vector<std::string> run_threads(int nranks, const RankBody& body, const accord_unique_id_t* given) {
  accord_unique_id_t id;
  if (given != nullptr) id = *given;
  else if (accord_get_unique_id(&id) != ACCORD_SUCCESS)
    return {std::string("unique id: ") + accord_last_error(nullptr)};
  std::vector<std::string> results(static_cast<size_t>(nranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] { results[static_cast<size_t>(r)] = run_one(id, r, nranks, body); });
  for (auto& t : threads) t.join();
  std::vector<std::string> failures;
  for (int r = 0; r < nranks; ++r)
    if (!results[static_cast<size_t>(r)].empty())
      failures.push_back("rank " + std::to_string(r) + ": " + results[static_cast<size_t>(r)]);
  return failures;
}

void note_rank_process(pid_t pid) {
  std::lock_guard<std::mutex> lock(rank_pids_mu);
  rank_pids.push_back(pid);
}

void forget_rank_processes() {
  std::lock_guard<std::mutex> lock(rank_pids_mu);
  rank_pids.clear();
}

size_t count_dir(const char* path) {
  size_t n = 0;
  if (DIR* d = opendir(path)) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    closedir(d);
  }
  return names;
}

std::string take_file(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return text;
}

std::vector<std::string> own_shm_segments() {
  std::vector<pid_t> pids;
  {
    std::lock_guard<std::mutex> lock(rank_pids_mu);
    pids = rank_pids;
  }
  pids.push_back(getpid());
  std::vector<std::string> out;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return out;
  constexpr char kPrefix[] = "accord-";
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, kPrefix, sizeof kPrefix - 1) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(e->d_name + sizeof kPrefix - 1, &end, 10);
    if (*end == '-' && std::find(pids.begin(), pids.end(), static_cast<pid_t>(pid)) != pids.end())
      out.emplace_back(e->d_name);
  }
  closedir(d);
  return out;
}

std::vector<std::string> mapped_shm_segments() {
  std::vector<std::string> out;
  std::ifstream maps("/proc/self/maps");
  const std::string prefix = "/dev/shm/accord-";
  for (std::string line; std::getline(maps, line);) {
    const size_t at = line.find(prefix);
    if (at == std::string::npos) continue;
    std::string name = line.substr(at + prefix.size() - std::strlen("accord-"));
    if (const size_t deleted = name.find(" (deleted)"); deleted != std::string::npos) name.resize(deleted);
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

namespace {
// Forks nprocs children, gives them a unique id made after the forks, runs child(id, index) in
// each and reports its non-empty result as "<what> <index>: ...", with crashes and hangs.
using Child = std::function<std::string(const accord_unique_id_t& id, int index)>;
std::vector<std::string> fork_children(int nprocs, const Child& child, int timeout_s, const char* what) {
  const int nranks = nprocs;
  // Fork every rank before the unique id exists: accord_get_unique_id starts the bootstrap
  // store's thread in this process, and a fork while that thread is inside malloc leaves the
  // child a locked allocator (glibc copes; GCC 12's AddressSanitizer does not, and the child
  // hangs). The children read the id from a pipe instead.
  std::vector<pid_t> pids;
  std::vector<int> pipes, id_pipes;
  for (int r = 0; r < nranks; ++r) {
    int fds[2], idfds[2];
    if (pipe(fds) != 0 || pipe(idfds) != 0) return {"pipe failed"};
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      close(idfds[1]);
      for (int f : id_pipes) close(f);
      accord_unique_id_t id;
      size_t got = 0;
      while (got < sizeof id) {
        ssize_t n = read(idfds[0], reinterpret_cast<char*>(&id) + got, sizeof id - got);
        if (n <= 0) _exit(3);  // the parent could not make an id: it reports that itself
        got += static_cast<size_t>(n);
      }
      close(idfds[0]);
      std::string msg = child(id, r);
      if (!msg.empty()) (void)!write(fds[1], msg.data(), msg.size());
      close(fds[1]);
      _exit(msg.empty() ? 0 : 1);
    }
    close(fds[1]);
    close(idfds[0]);
    if (pid > 0) note_rank_process(pid);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
    id_pipes.push_back(idfds[1]);
  }
  accord_unique_id_t id;
  const bool have_id = accord_get_unique_id(&id) == ACCORD_SUCCESS;
  for (int f : id_pipes) {
    if (have_id) (void)!write(f, &id, sizeof id);  // 128 bytes: one atomic pipe write
    close(f);
  }
  if (!have_id) {
    for (pid_t pid : pids) waitpid(pid, nullptr, 0);
    return {std::string("unique id: ") + accord_last_error(nullptr)};
  }
  std::vector<std::string> failures;
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < nranks; ++r) {
    std::string msg;
    char buf[4096];
    for (;;) {
      pollfd p{pipes[static_cast<size_t>(r)], POLLIN, 0};
      int left_ms = timeout_s * 1000 - static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                          std::chrono::steady_clock::now() - start).count());
      if (left_ms <= 0 || poll(&p, 1, left_ms) <= 0) {
        msg += " [hung: killed after " + std::to_string(timeout_s) + " s]";
        for (pid_t pid : pids) kill(pid, SIGKILL);
        break;
      }
      ssize_t n = read(pipes[static_cast<size_t>(r)], buf, sizeof buf);
      if (n <= 0) break;
      msg.append(buf, static_cast<size_t>(n));
    }
    close(pipes[static_cast<size_t>(r)]);
    int status = 0;
    waitpid(pids[static_cast<size_t>(r)], &status, 0);
    if (WIFSIGNALED(status)) msg += " [killed by signal " + std::to_string(WTERMSIG(status)) + "]";
    else if (WEXITSTATUS(status) != 0 && msg.empty()) msg = "exit code " + std::to_string(WEXITSTATUS(status));
    if (!msg.empty()) failures.push_back(std::string(what) + " " + std::to_string(r) + ": " + msg);
  }
  return failures;
}
}  // namespace

std::vector<std::string> run_processes(int nranks, const RankBody& body, int timeout_s,
                                       const std::function<void(int rank)>& before_init) {
  return fork_children(nranks, [&](const accord_unique_id_t& id, int r) {
    if (before_init) before_init(r);
    return run_one(id, r, nranks, body);
  }, timeout_s, "rank");
}

std::vector<std::string> run_process_groups(int nprocs, int per_process, const RankBody& body, int timeout_s) {
  const int nranks = nprocs * per_process;
  return fork_children(nprocs, [&](const accord_unique_id_t& id, int p) {
    std::vector<accord_comm_t> comms(static_cast<size_t>(per_process), nullptr);
    std::vector<std::string> results(static_cast<size_t>(per_process));
    std::vector<std::thread> threads;
    for (int i = 0; i < per_process; ++i)
      threads.emplace_back([&, i] {
        const int r = p * per_process + i;
        std::string& msg = results[static_cast<size_t>(i)];
        if (accord_comm_init_rank(&comms[static_cast<size_t>(i)], nranks, id, r) != ACCORD_SUCCESS)
          msg = std::string("init failed: ") + accord_last_error(nullptr);
        else
          msg = body(comms[static_cast<size_t>(i)], r, nranks);
      });
    for (auto& t : threads) t.join();
    // One thread destroys them all, in rank order (ncclCommDestroy in a loop).
    for (int i = 0; i < per_process; ++i) {
      std::string& msg = results[static_cast<size_t>(i)];
      if (comms[static_cast<size_t>(i)] != nullptr && accord_comm_destroy(comms[static_cast<size_t>(i)]) != ACCORD_SUCCESS &&
          msg.empty())
        msg = "destroy failed";
    }
    std::string all;
    for (int i = 0; i < per_process; ++i)
      if (!results[static_cast<size_t>(i)].empty())
        all += "rank " + std::to_string(p * per_process + i) + ": " + results[static_cast<size_t>(i)] + "; ";
    if (all.empty() && g_after_destroy) all = g_after_destroy();
    return all;
  }, timeout_s, "process");
}

void fill_input(void* buf, size_t count, accord_datatype_t dtype, accord_red_op_t op, int rank, int nranks,
                size_t seed) {
  (void)nranks;
  for (size_t i = 0; i < count; ++i) store(buf, i, dtype, value_for(dtype, op, rank, i, seed));
}

void fill_expected(void* buf, size_t count, accord_datatype_t dtype, accord_red_op_t op, int nranks, size_t seed) {
  for (size_t i = 0; i < count; ++i) {
    double acc = value_for(dtype, op, 0, i, seed);
    for (int r = 1; r < nranks; ++r) {
      double v = value_for(dtype, op, r, i, seed);
      switch (op) {
        case ACCORD_SUM:
        case ACCORD_AVG: acc += v; break;
        case ACCORD_PROD: acc *= v; break;
        case ACCORD_MAX: acc = std::max(acc, v); break;
        case ACCORD_MIN: acc = std::min(acc, v); break;
        default: break;
      }
    }
    if (op == ACCORD_AVG) {
      if (dtype == ACCORD_FLOAT64) acc = acc / nranks;
      else if (is_float(dtype)) acc = static_cast<double>(static_cast<float>(acc) / static_cast<float>(nranks));
      else acc = std::trunc(acc / nranks);  // C division truncates toward zero
    }
    store(buf, i, dtype, acc);
  }
}

size_t count_mismatches(const void* got, const void* want, size_t count, accord_datatype_t dtype) {
  size_t es = accord_dtype_size(dtype), bad = 0;
  for (size_t i = 0; i < count; ++i)
    bad += std::memcmp(static_cast<const char*>(got) + i * es, static_cast<const char*>(want) + i * es, es) != 0;
  return bad;
}

const char* dtype_name(accord_datatype_t d) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                "float16", "float32", "float64", "bfloat16"};
  return d >= 0 && d < ACCORD_NUM_DTYPES ? names[d] : "?";
}

const char* op_name(accord_red_op_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < ACCORD_NUM_OPS ? names[op] : "?";
}

}  // namespace accord::testing
