// Launcher environments, as forked processes: torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/
// MASTER_PORT (with ACCORD_SECRET, logging at debug to files that must not contain the
// secret), Open MPI-style variables without MPI (rendezvous file), bad variables, and a rank
// with the wrong secret. Ranks of one host that cannot share memory (a rank with a /dev/shm of
// its own, in a mount namespace; root only, else SKIP) or must not (ACCORD_SHM_DISABLE=1)
// talk over TCP.
#include <accord/accord.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <atomic>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/log.hpp"
#include "tests/support/harness.hpp"
#include "transport/bootstrap/store.hpp"
#include "transport/socket.hpp"

namespace accord {
namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

// What a rank process does besides init and the all-reduce.
struct RankHooks {
  std::function<int(size_t index)> before_init;  // in the child; non-zero: exit with that code
  bool report_plan = false;  // on success the rank's accord_comm_plan goes to *errors
  bool capture_stderr = false;  // the rank's stderr (its log) goes to *errors too
  // While its communicator is up, the rank lists the /dev/shm segments it has mapped, its own
  // and its peers' ("segment NAME" lines in *errors). Not a listing of /dev/shm: the names are
  // unlinked once every local peer has mapped them, so after init that shows none either way.
  bool report_segments = false;
};

// Forks one process per env; each sets its variables, inits from the environment and runs an
// all-reduce of nranks ones. Returns each process's exit code (0 ok, 10 + status otherwise).
std::vector<int> run_env_ranks(const std::vector<Env>& envs,
                               std::vector<std::string>* errors = nullptr,
                               const RankHooks& hooks = {}) {
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (const Env& env : envs) {
    int fds[2];
    if (pipe(fds) != 0) return {};
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      if (hooks.capture_stderr) dup2(fds[1], 2);
      for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                            "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_ess_base_jobid", "ACCORD_SECRET"})
        unsetenv(v);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      log_reconfigure();
      if (hooks.before_init)
        if (const int code = hooks.before_init(pids.size())) _exit(code);
      accord_comm_t comm = nullptr;
      accord_status_t s = accord_comm_init_from_env(&comm);
      if (s == ACCORD_SUCCESS) {
        int n = 0;
        accord_comm_count(comm, &n);
        std::vector<float> x(1000, 1.0f);
        s = accord_all_reduce(x.data(), x.data(), x.size(), ACCORD_FLOAT32, ACCORD_SUM, comm, nullptr);
        if (s == ACCORD_SUCCESS && x[999] != static_cast<float>(n)) s = ACCORD_ERR_INTERNAL;
        if (s != ACCORD_SUCCESS) (void)!write(fds[1], accord_last_error(comm), strlen(accord_last_error(comm)));
        char plan[4096];
        size_t len = sizeof plan;
        if (s == ACCORD_SUCCESS && hooks.report_plan &&
            accord_comm_plan(comm, plan, &len) == ACCORD_SUCCESS)
          (void)!write(fds[1], plan, strnlen(plan, sizeof plan));
        if (s == ACCORD_SUCCESS && hooks.report_segments)
          for (const std::string& name : testing::mapped_shm_segments()) {
            const std::string line = "segment " + name + "\n";
            (void)!write(fds[1], line.data(), line.size());
          }
        accord_comm_destroy(comm);
      } else {
        (void)!write(fds[1], accord_last_error(nullptr), strlen(accord_last_error(nullptr)));
      }
      _exit(s == ACCORD_SUCCESS ? 0 : 10 + s);
    }
    close(fds[1]);
    if (pid > 0) testing::note_rank_process(pid);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  std::vector<int> codes;
  for (size_t i = 0; i < pids.size(); ++i) {
    std::string msg;
    char buf[1024];
    ssize_t n;
    while ((n = read(pipes[i], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
    close(pipes[i]);
    int status = 0;
    waitpid(pids[i], &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 100);
    if (errors) errors->push_back(msg);
  }
  return codes;
}

// A port no one listens on or connects from: the kernel's pick for a listener on port 0,
// closed again. A random port (as before) could be one another test's connection holds, and
// then rank 0 cannot listen ("another process holds the port").
std::string free_port() {
  SockAddr addr;
  Fd fd;
  if (!parse_address("127.0.0.1", 0, &addr).ok() || !tcp_listen(&addr, 1, &fd).ok()) {
    ADD_FAILURE() << "no free port on 127.0.0.1";
    return "0";
  }
  return std::to_string(addr.port());
}

TEST(Launch, TorchrunStyleEnvironmentWithSecretNeverLogged) {
  const std::string port = free_port(), secret = "s3cr3t-" + port + "-do-not-log";
  char dir[] = "/tmp/accord-launch-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::vector<Env> envs;
  for (int r = 0; r < 3; ++r)
    envs.push_back({{"RANK", std::to_string(r)}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", port}, {"ACCORD_SECRET", secret}, {"ACCORD_LOG", "debug"},
                    {"ACCORD_LOG_FILE", std::string(dir) + "/log-%p"}});
  std::vector<std::string> errors;
  auto codes = run_env_ranks(envs, &errors);
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << ": " << errors[r];
  std::string cmd = std::string("cat ") + dir + "/log-* 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string all;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) all.append(buf, n);
  pclose(p);
  EXPECT_GT(all.size(), 100u) << "debug logs were not written";
  EXPECT_NE(all.find("ACCORD_SECRET=(set, not shown)"), std::string::npos);
  EXPECT_EQ(all.find(secret), std::string::npos) << "the secret appears in the logs";
  EXPECT_EQ(system((std::string("rm -rf ") + dir).c_str()), 0);
}

TEST(Launch, WrongSecretIsRefused) {
  const std::string port = free_port();
  std::vector<Env> envs;
  for (int r = 0; r < 2; ++r)
    envs.push_back({{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", port}, {"ACCORD_SECRET", r == 0 ? "right" : "wrong"},
                    {"ACCORD_INIT_TIMEOUT_MS", "3000"}});
  std::vector<std::string> errors;
  auto codes = run_env_ranks(envs, &errors);
  EXPECT_NE(codes[1], 0);
  EXPECT_NE(errors[1].find("secret"), std::string::npos) << errors[1];
  EXPECT_NE(codes[0], 0);  // rank 1 never joined
}

TEST(Launch, OpenMpiStyleEnvironmentWithoutMpiMeetsThroughARendezvousFile) {
  const std::string job = "test-" + free_port();
  testing::forget_rank_processes();
  std::vector<Env> envs;
  for (int r = 0; r < 3; ++r)
    envs.push_back({{"OMPI_COMM_WORLD_RANK", std::to_string(r)}, {"OMPI_COMM_WORLD_SIZE", "3"},
                    {"OMPI_MCA_ess_base_jobid", job}});
  std::vector<std::string> errors;
  auto codes = run_env_ranks(envs, &errors);
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << ": " << errors[r];
  std::string file = "/tmp/accord-" + std::to_string(getuid()) + "-ompi-" + job + ".boot";
  EXPECT_NE(access(file.c_str(), F_OK), 0) << "rendezvous file left behind: " << file;
  const std::vector<std::string> left = testing::own_shm_segments();
  EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << left.front();
}

// A bootstrap directory that is not there fails every rank at once, not only rank 0 (which
// cannot write its rendezvous file): the others used to wait for the file until the init
// timeout.
TEST(Launch, UnusableBootstrapDirFailsEveryRankAtOnce) {
  const std::string job = "test-" + free_port();
  testing::forget_rank_processes();
  for (const char* dir : {"/nonexistent-accord-bootstrap-dir", "/proc/version"}) {
    std::vector<Env> envs;
    for (int r = 0; r < 3; ++r)
      envs.push_back({{"OMPI_COMM_WORLD_RANK", std::to_string(r)}, {"OMPI_COMM_WORLD_SIZE", "3"},
                      {"OMPI_MCA_ess_base_jobid", job}, {"ACCORD_BOOTSTRAP_DIR", dir},
                      {"ACCORD_INIT_TIMEOUT_MS", "60000"}});
    std::vector<std::string> errors;
    const auto start = std::chrono::steady_clock::now();
    const auto codes = run_env_ranks(envs, &errors);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(codes.size(), 3u);
    for (size_t r = 0; r < codes.size(); ++r) {
      EXPECT_NE(codes[r], 0) << dir << ": rank " << r << " succeeded";
      EXPECT_NE(errors[r].find("ACCORD_BOOTSTRAP_DIR=" + std::string(dir)), std::string::npos)
          << dir << ": rank " << r << ": " << errors[r];
      EXPECT_NE(errors[r].find("rank " + std::to_string(r) + ":"), std::string::npos) << errors[r];
    }
    EXPECT_LT(s, 30) << dir << ": the ranks took " << s << " s to fail (init timeout 60 s)";
  }
}

TEST(Launch, BadEnvironmentsSayWhatIsWrong) {
  struct Case {
    Env env;
    const char* needle;
  } cases[] = {
      {{{"RANK", "0"}}, "WORLD_SIZE"},
      {{{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "not a number"},
      {{{"RANK", "5"}, {"WORLD_SIZE", "2"}}, "out of range"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}}, "MASTER_PORT"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "99999"}},
       "port"},
      {{{"RANK", "1"},
        {"WORLD_SIZE", "2"},
        {"MASTER_ADDR", "no-such-host.invalid"},
        {"MASTER_PORT", "1234"}},
       "resolve"},
      {{{"ACCORD_TIMEOUT_MS", "soon"}}, "ACCORD_TIMEOUT_MS"},
      {{{"ACCORD_ALGO", "magic"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}}, "ACCORD_ALGO"},
      {{{"ACCORD_SHM_SLOT_BYTES", "128M"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}},
       "ACCORD_SHM_SLOT_BYTES=134217728 is too large"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> errors;
    auto codes = run_env_ranks({c.env}, &errors);
    EXPECT_NE(codes[0], 0) << c.needle;
    EXPECT_NE(errors[0].find(c.needle), std::string::npos) << "'" << errors[0] << "' lacks '" << c.needle << "'";
  }
}

// Note [A rank that fails alone at init] (transport/bootstrap/store.hpp): a rank whose own
// setting is bad still meets the others to tell them, so the whole job fails at once, naming
// that rank and its reason, not after ACCORD_INIT_TIMEOUT_MS (30 s here). When the bad rank is
// rank 0, which runs the bootstrap server, it stays until the late ranks have been told.
// Rank 0 warns that it waits only when ranks are still missing 2 s after its failure: the late
// ranks start after its warning is in its log (an order, not a time), and where they come at
// once the warning must be absent if the whole job took under 2 s (a run that took longer, on
// a loaded machine, proves nothing and is tried again).
TEST(Launch, RankWithABadSettingFailsEveryRankAtOnceNamingIt) {
  char dir[] = "/tmp/accord-bad-setting-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string missing_tune = std::string(dir) + "/no-such.tune";
  enum Late { kNo, kAfterWarning, kSoon };  // when the other ranks start
  struct Case {
    int bad_rank;
    std::pair<const char*, std::string> setting;
    const char* needle;  // in every rank's message
    Late late;
  } cases[] = {
      {0, {"ACCORD_ALGO", "bogus"}, "ACCORD_ALGO='bogus' is not an algorithm", kAfterWarning},
      {2, {"ACCORD_TUNE_FILE", missing_tune}, "no-such.tune", kNo},
      {1, {"ACCORD_CHUNK_BYTES", "lots"}, "ACCORD_CHUNK_BYTES='lots' is not a size", kNo},
      {0, {"ACCORD_SHM_NSLOTS", "2"}, "ACCORD_SHM_NSLOTS=2 is too small", kSoon},
      {1, {"ACCORD_DEVICE_P2P_BYTES", "8192"}, "ACCORD_DEVICE_P2P_BYTES=8192 gives point-to-point FIFO slots of 0 bytes", kNo},
      {1, {"ACCORD_SHARED_GPU_SYNC", "sometimes"}, "ACCORD_SHARED_GPU_SYNC='sometimes' is not a hand-off mode", kNo},
      {2, {"ACCORD_P2P_COPY_MIN_BYTES", "-2"}, "ACCORD_P2P_COPY_MIN_BYTES=-2: give a size in bytes", kNo},
      {2, {"ACCORD_DIRECT_POINTER_MIN_BYTES", "-3"}, "ACCORD_DIRECT_POINTER_MIN_BYTES=-3: give a size in bytes", kNo},
  };
  const std::string warning = "waits (at most";
  auto read_file = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  int run = 0;
  for (const Case& c : cases) {
    constexpr int kTries = 5;  // for kSoon: runs that took 2 s or more prove nothing
    for (int attempt = 1; attempt <= kTries; ++attempt) {
      const std::string port = free_port();
      const std::string log0 = std::string(dir) + "/rank0-" + std::to_string(run++) + ".log";
      std::vector<Env> envs;
      for (int r = 0; r < 3; ++r) {
        envs.push_back({{"RANK", std::to_string(r)}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "127.0.0.1"},
                        {"MASTER_PORT", port}, {"ACCORD_INIT_TIMEOUT_MS", "30000"}, {"ACCORD_LOG", "error"}});
        if (r == c.bad_rank) envs.back().push_back({c.setting.first, c.setting.second});
        if (r == 0 && c.late != kNo) {
          envs.back().push_back({"ACCORD_LOG", "warn"});
          envs.back().push_back({"ACCORD_LOG_FILE", log0});
        }
      }
      RankHooks hooks;
      hooks.capture_stderr = true;
      hooks.before_init = [&](size_t index) {
        if (static_cast<int>(index) == c.bad_rank) return 0;
        if (c.late == kSoon) usleep(300 * 1000);
        // At most 20 s: a rank 0 that never warns fails the check below, not the test's timeout.
        for (int i = 0; c.late == kAfterWarning && i < 2000 && read_file(log0).find(warning) == std::string::npos; ++i)
          usleep(10 * 1000);
        return 0;
      };
      std::vector<std::string> errors;
      const auto start = std::chrono::steady_clock::now();
      auto codes = run_env_ranks(envs, &errors, hooks);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ASSERT_EQ(codes.size(), 3u);
      for (int r = 0; r < 3; ++r) {
        const std::string& e = errors[static_cast<size_t>(r)];
        EXPECT_NE(codes[static_cast<size_t>(r)], 0) << c.needle << ": rank " << r << " succeeded";
        EXPECT_NE(e.find(c.needle), std::string::npos) << "rank " << r << ": '" << e << "' lacks '" << c.needle << "'";
        if (r != c.bad_rank) {
          EXPECT_NE(e.find("rank " + std::to_string(c.bad_rank) + " failed during init"), std::string::npos)
              << "rank " << r << ": '" << e << "' does not name rank " << c.bad_rank;
        }
      }
      // Half of ACCORD_INIT_TIMEOUT_MS: a job that waited for it would take all of it.
      EXPECT_LT(secs, 15.0) << c.needle << ": the job must fail at once, not at ACCORD_INIT_TIMEOUT_MS (30 s)";
      const std::string said = c.late == kNo ? "" : read_file(log0);
      if (c.late == kAfterWarning) {
        EXPECT_NE(said.find(warning), std::string::npos)
            << c.needle << ": rank 0 did not warn that it waits, its log: '" << said << "'";
      }
      if (c.late == kSoon) {
        if (secs >= 2.0 && attempt < kTries) {  // the others may have come 2 s late
          std::printf("# %s: try %d of %d took %.2f s (2 s or more proves nothing): again\n", c.needle, attempt,
                      kTries, secs);
          continue;
        }
        EXPECT_LT(secs, 2.0) << c.needle << ": no run of " << kTries
                             << " took under 2 s, so none shows that rank 0 stays quiet when the others "
                                "come at once (is the machine that loaded?)";
        EXPECT_EQ(said.find(warning), std::string::npos)
            << c.needle << ": the others came within 2 s (the job took " << secs << " s), yet rank 0 said '"
            << said << "'";
      }
      break;
    }
  }
  EXPECT_EQ(system((std::string("rm -rf ") + dir).c_str()), 0);
}

// The registry of this process's bootstrap servers (Note [A rank that fails alone at init])
// survives a fork: servers start and end on other threads (their constructors and exits take
// the registry's lock) while this thread forks children that take the lock, as a failing rank
// does. A child forked while a server thread held the lock would wait for it forever (found by
// `meson test --num-processes 12`: three ranks of a settings test hung).
TEST(Launch, ForkWhileBootstrapServersStartAndEndLeavesTheChildAUsableRegistry) {
  testing::ScopedEnv linger("ACCORD_INIT_TIMEOUT_MS", "50");  // each idle server ends 50 ms after it started
  const size_t threads_before = testing::count_dir("/proc/self/task");  // ThreadSanitizer has one of its own
  std::atomic<bool> stop{false};
  std::thread churn([&stop] {
    while (!stop.load()) {
      accord_unique_id_t id;
      if (accord_get_unique_id(&id) != ACCORD_SUCCESS) return;
      usleep(500);  // about 100 servers alive at a time
    }
  });
  StoreEndpoint unknown;  // no server of this process has its secret
  int hung = 0, forks = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < until && hung == 0) {
    const pid_t pid = fork();
    if (pid == 0) {
      wait_for_store_server(unknown, 0, Deadline::after_ms(10));
      _exit(0);
    }
    if (pid < 0) {  // not ASSERT: the churn thread must be joined below
      ADD_FAILURE() << "fork failed: " << strerror(errno);
      break;
    }
    ++forks;
    int status = 0;
    // The child's own wait ends after 10 ms; one that hung on the lock waits forever. 20 s
    // tells the two apart on a loaded machine too.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > give_up) {
        ++hung;
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      usleep(200);
    }
  }
  stop = true;
  churn.join();
  // The next tests fork ranks that start threads: under ThreadSanitizer that needs a process
  // with no other thread left, so wait for the servers to end (50 ms each, then their poll).
  const auto quiet = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (store_servers_running() > 0 && std::chrono::steady_clock::now() < quiet) usleep(10000);
  // Then their threads' last steps; at most 1 s (ThreadSanitizer's own thread starts with the
  // first other thread, so the count may stay one above).
  const auto settle = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (testing::count_dir("/proc/self/task") > threads_before && std::chrono::steady_clock::now() < settle)
    usleep(10000);
  EXPECT_EQ(store_servers_running(), 0) << "bootstrap servers still running 10 s after the churn stopped";
  EXPECT_EQ(hung, 0) << "a child forked after " << forks << " forks waited 20 s for the registry's lock";
  EXPECT_GT(forks, 10);
}

// In a new mount namespace, a tmpfs of this process's own on /dev/shm: a container that shares
// the host's name and boot id but not its /dev/shm. 0, or why not.
std::string private_dev_shm() {
  if (unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS): ") + strerror(errno);
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("making / private: ") + strerror(errno);
  if (mount("tmpfs", "/dev/shm", "tmpfs", 0, "mode=1777,size=256m") != 0)
    return std::string("mount -t tmpfs tmpfs /dev/shm: ") + strerror(errno);
  return "";
}

// Whether private_dev_shm works here (root, and a kernel and container that allow it), tried
// in a child so that this process keeps its namespace.
std::string cannot_have_private_dev_shm() {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const std::string why = private_dev_shm();
    (void)!write(fds[1], why.data(), why.size());
    _exit(0);
  }
  close(fds[1]);
  std::string why;
  char buf[256];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) why.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return why;
}

// Issue 20, item 5: ranks 0 and 1 share /dev/shm; rank 2 has the same hostname and boot id but
// a /dev/shm of its own, so it cannot map their segments. Init succeeds: 0-1 over shared memory,
// 2 over TCP to both, as the plan says (Note [Shared memory domain], collectives/communicator.cpp).
TEST(Launch, RankWithItsOwnDevShmTalksOverTcp) {
  const std::string why = cannot_have_private_dev_shm();
  if (!why.empty()) GTEST_SKIP() << "needs a mount namespace with its own /dev/shm (root): " << why;
  const std::string port = free_port();
  testing::forget_rank_processes();
  std::vector<Env> envs;
  for (int r = 0; r < 3; ++r)
    envs.push_back({{"RANK", std::to_string(r)}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", port}, {"ACCORD_INIT_TIMEOUT_MS", "20000"}});
  RankHooks hooks;
  hooks.before_init = [](size_t index) { return index == 2 && !private_dev_shm().empty() ? 3 : 0; };
  hooks.report_plan = true;
  std::vector<std::string> out;
  auto codes = run_env_ranks(envs, &out, hooks);
  ASSERT_EQ(codes.size(), 3u);
  for (size_t r = 0; r < codes.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(codes[r], 0) << out[r];
    EXPECT_NE(out[r].find("pair 0-1: shm"), std::string::npos) << out[r];
    EXPECT_NE(out[r].find("pair 0-2: tcp (same host"), std::string::npos) << out[r];
    EXPECT_NE(out[r].find("pair 1-2: tcp (same host"), std::string::npos) << out[r];
    EXPECT_NE(out[r].find("another /dev/shm"), std::string::npos) << out[r];
  }
  const std::vector<std::string> left = testing::own_shm_segments();
  EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << left.front();
}

// ACCORD_SHM_DISABLE=1: ranks of one host talk over TCP, and none makes a segment. The same
// job with ACCORD_SHM_DISABLE=0 first shows that a rank's report sees the segments it maps.
TEST(Launch, ShmDisableMeansTcpBetweenRanksOfOneHost) {
  for (const char* disable : {"0", "1"}) {
    SCOPED_TRACE(std::string("ACCORD_SHM_DISABLE=") + disable);
    const bool off = std::strcmp(disable, "1") == 0;
    const std::string port = free_port();
    std::vector<Env> envs;
    for (int r = 0; r < 2; ++r)
      envs.push_back({{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", port}, {"ACCORD_SHM_DISABLE", disable}});
    RankHooks hooks;
    hooks.report_plan = true;
    hooks.report_segments = true;
    testing::forget_rank_processes();
    std::vector<std::string> out;
    auto codes = run_env_ranks(envs, &out, hooks);
    ASSERT_EQ(codes.size(), 2u);
    for (size_t r = 0; r < codes.size(); ++r) {
      EXPECT_EQ(codes[r], 0) << "rank " << r << ": " << out[r];
      EXPECT_NE(out[r].find(off ? "pair 0-1: tcp (same host" : "pair 0-1: shm (same host"), std::string::npos)
          << out[r];
      if (off) {
        EXPECT_NE(out[r].find("ACCORD_SHM_DISABLE=1"), std::string::npos) << out[r];
        EXPECT_EQ(out[r].find("segment "), std::string::npos) << "rank " << r << " mapped a /dev/shm segment: " << out[r];
      } else {
        EXPECT_NE(out[r].find("segment "), std::string::npos)
            << "rank " << r << " talks over shared memory yet reported no mapped segment, so the report "
            << "cannot show one made with ACCORD_SHM_DISABLE=1 either: " << out[r];
      }
    }
    const std::vector<std::string> left = testing::own_shm_segments();
    EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << left.front();
  }
}

TEST(Launch, NoLauncherMeansOneRank) {
  auto codes = run_env_ranks({Env{}});
  EXPECT_EQ(codes[0], 0);
}

}  // namespace
}  // namespace accord
