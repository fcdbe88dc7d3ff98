// Test harness: run N ranks as threads of this process or as forked processes, each with
// its own communicator, and collect what each rank reports.
#pragma once

#include <accord/accord.h>
#include <sys/types.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace accord::testing {

// ThreadSanitizer sees races between threads only, and instruments every load: the TSan stage
// of scripts/test.sh shrinks the largest sizes and process-only cases (the plain and ASan
// stages keep them).
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

// Body of one rank. Returns an empty string on success, else what went wrong.
using RankBody = std::function<std::string(accord_comm_t comm, int rank, int nranks)>;

// Creates a unique id, runs nranks threads that each init a communicator and run body.
// Returns one message per failing rank ("rank 2: ...").
// `id` may be given (e.g. to attack its bootstrap server while the job runs).
std::vector<std::string> run_threads(int nranks, const RankBody& body, const accord_unique_id_t* id = nullptr);

// Same with nranks forked processes (forked first; the unique id reaches them by pipe). A process that
// crashes or hangs past timeout_s is reported too. before_init, if given, runs in each child
// before its communicator is made (to give one rank an environment of its own).
std::vector<std::string> run_processes(int nranks, const RankBody& body, int timeout_s = 120,
                                       const std::function<void(int rank)>& before_init = nullptr);

// nprocs forked processes of per_process ranks each, as threads (process p has ranks
// p * per_process ...): each rank runs body on its own thread, then the process's main thread
// destroys its communicators one after another in rank order, as a process driving several
// GPUs does (ncclCommDestroy in a loop). Failures read "process P: rank R: ...".
std::vector<std::string> run_process_groups(int nprocs, int per_process, const RankBody& body, int timeout_s = 120);

// A check that each rank runs after destroying its communicator (run_threads, run_processes);
// a non-empty result is that rank's failure. Tests that link Accord's internals use it to ask
// the simulated runtime for broken rules (sim::rule_violations). Empty: none.
void set_after_destroy(std::function<std::string()> check);

// The shared-memory segments (transport/shm: /dev/shm/accord-<pid>-<random>) that this process
// or the processes it forked for ranks (run_processes, note_rank_process) since the last
// forget_rank_processes() have left in /dev/shm. A test checks only these: other tests running
// beside it have segments of their own there. Forget at the start of each test, since pids are
// reused (pid_max may be 32768).
std::vector<std::string> own_shm_segments();

// The shared-memory segments (/dev/shm/accord-*) that this process has mapped now, from
// /proc/self/maps: its own and its peers', also once their names are unlinked (transport/shm
// unlinks them when every local peer has mapped them, so a listing of /dev/shm after init shows
// none). Only this process's view: other tests' segments cannot show up here.
std::vector<std::string> mapped_shm_segments();

// Entries of a directory, "." and ".." included: /proc/self/fd and /proc/self/task count this
// process's open files and threads (compare two counts, not a count with a constant).
size_t count_dir(const char* path);
// The names of the files in `dir` (not . and ..), and the text of the file at `path`, which
// take_file then removes (the per-process logs of ACCORD_LOG_FILE=DIR/...-%p).
std::vector<std::string> files_in(const std::string& dir);
std::string take_file(const std::string& path);
void note_rank_process(pid_t pid);
void forget_rank_processes();

// Deterministic inputs whose reductions are exact in every dtype and any order:
// small integers (see value_for). Writes count elements of dtype for rank.
void fill_input(void* buf, size_t count, accord_datatype_t dtype, accord_red_op_t op, int rank, int nranks,
                size_t seed = 0);
// Expected result of reducing fill_input over nranks, for element i.
void fill_expected(void* buf, size_t count, accord_datatype_t dtype, accord_red_op_t op, int nranks,
                   size_t seed = 0);
// Number of elements that differ bit for bit.
size_t count_mismatches(const void* got, const void* want, size_t count, accord_datatype_t dtype);

const char* dtype_name(accord_datatype_t d);
const char* op_name(accord_red_op_t op);

// Sets an environment variable for one scope, then restores it (or unsets it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace accord::testing
