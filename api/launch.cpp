// Launcher environments (see launch.hpp and accord_comm_init_from_env in accord.h).
//
// Secrets: a unique id carries a random secret. A rendezvous file (mpirun, Slurm, PMI without
// MASTER_ADDR) is written by rank 0 with mode 0600 and carries a random secret too. With
// MASTER_ADDR/MASTER_PORT the ranks share nothing secret unless the user sets ACCORD_SECRET on
// every rank; otherwise the key is derived from the job's environment, which keeps out
// strangers and other jobs but not a local user who can read that environment.
#include "api/launch.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/crypto.hpp"
#include "core/log.hpp"
#include "transport/tcp/interface.hpp"

namespace accord {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

Status parse_rank_env(const char* rank_var, const char* size_var, int* rank, int* nranks) {
  const char* r = env(rank_var);
  const char* n = env(size_var);
  if (n == nullptr)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "%s is set but %s is not; the launcher must set both", rank_var, size_var);
  char* end = nullptr;
  long rv = std::strtol(r, &end, 10);
  if (*end != '\0') return error(ACCORD_ERR_INVALID_ARGUMENT, "%s='%s' is not a number", rank_var, r);
  long nv = std::strtol(n, &end, 10);
  if (*end != '\0' || nv < 1) return error(ACCORD_ERR_INVALID_ARGUMENT, "%s='%s' is not a positive number", size_var, n);
  if (rv < 0 || rv >= nv)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "%s=%ld is out of range for %s=%ld", rank_var, rv, size_var, nv);
  *rank = static_cast<int>(rv);
  *nranks = static_cast<int>(nv);
  return Status::success();
}

Secret secret_from_text(const std::string& text) {
  Digest d = sha256(text.data(), text.size());
  Secret s;
  std::memcpy(s.data(), d.data(), s.size());
  return s;
}

// Starts a server bound to `bind_text` (ip or ip:port; empty = loopback, any port).
Status start_server(const std::string& bind_text, uint16_t default_port, const Secret& secret, int64_t linger_ms,
                    StoreEndpoint* endpoint) {
  endpoint->secret = secret;
  ACCORD_TRY(parse_address(bind_text.empty() ? "127.0.0.1" : bind_text, default_port, &endpoint->addr));
  return start_store_server(endpoint, linger_ms);
}

std::string job_key() {
  if (const char* v = env("ACCORD_JOB_ID")) return v;
  if (const char* v = env("OMPI_MCA_ess_base_jobid")) return std::string("ompi-") + v;
  if (const char* v = env("PMIX_NAMESPACE")) return std::string("pmix-") + v;
  if (const char* v = env("SLURM_JOB_ID")) {
    const char* step = env("SLURM_STEP_ID");
    return std::string("slurm-") + v + "." + (step ? step : "0");
  }
  if (const char* v = env("PMI_KVSNAME")) return std::string("pmi-") + v;
  return "";
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  return out;
}

// Rank 0 writes "pid hex(id)" to the file; the others wait for a file whose writer is alive.
Status rendezvous_by_file(InitSpec* spec, LaunchCleanup* cleanup) {
  const std::string key = job_key();
  if (key.empty())
    return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: the launcher gave no job id to meet the other ranks by; set "
                 "MASTER_ADDR and MASTER_PORT (rank 0's address and a free port) on every rank, or ACCORD_JOB_ID "
                 "to the same value on every rank of one host", spec->rank);
  const std::string path = spec->settings.bootstrap_dir + "/accord-" + std::to_string(getuid()) + "-" +
                           sanitize(key) + ".boot";
  const Deadline deadline = Deadline::after_ms(spec->settings.init_timeout_ms);
  // Every rank looks at the directory first: where rank 0 cannot write its file, the others
  // would otherwise wait for it until ACCORD_INIT_TIMEOUT_MS. Ranks that meet through a file
  // share a host and a user, so what this rank sees there is what rank 0 sees.
  const std::string& dir = spec->settings.bootstrap_dir;
  struct stat st;
  const char* why = nullptr;
  if (stat(dir.c_str(), &st) != 0)
    why = std::strerror(errno);
  else if (!S_ISDIR(st.st_mode))
    why = "not a directory";
  else if (access(dir.c_str(), W_OK | X_OK) != 0)
    why = std::strerror(errno);
  if (why != nullptr)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: ACCORD_BOOTSTRAP_DIR=%s is not a directory this user can "
                 "write (%s), so rank 0 cannot leave the rendezvous file there for the ranks of this host; set "
                 "ACCORD_BOOTSTRAP_DIR to a writable directory on every rank, or MASTER_ADDR and MASTER_PORT",
                 spec->rank, dir.c_str(), why);
  if (spec->rank == 0) {
    unlink(path.c_str());
    Secret secret;
    ACCORD_TRY(random_bytes(secret.data(), secret.size()));
    ACCORD_TRY(start_server(spec->settings.bootstrap_addr, 0, secret, spec->settings.init_timeout_ms, &spec->endpoint));
    accord_unique_id_t id;
    encode_unique_id(spec->endpoint, id.internal);
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
      return system_error(errno, "rank 0: cannot create the rendezvous file %s (ACCORD_BOOTSTRAP_DIR must be a "
                          "writable directory)", tmp.c_str());
    std::string text = std::to_string(getpid()) + " " + to_hex(id.internal, sizeof id.internal) + "\n";
    bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    close(fd);
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
      unlink(tmp.c_str());
      return system_error(errno, "rank 0: cannot write the rendezvous file %s", path.c_str());
    }
    cleanup->remove_file_after_init(path);
    return Status::success();
  }
  for (;;) {
    std::ifstream f(path);
    long pid = 0;
    std::string hex;
    if (f >> pid >> hex && hex.size() == 2 * ACCORD_UNIQUE_ID_BYTES && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) {
      accord_unique_id_t id;
      for (size_t i = 0; i < ACCORD_UNIQUE_ID_BYTES; ++i)
        id.internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
      return decode_unique_id(id.internal, &spec->endpoint);
    }
    if (deadline.expired())
      return error(ACCORD_ERR_TIMEOUT, "rank %d: timed out after %lld ms waiting for rank 0 to write %s; is rank 0 "
                   "running on this host? (ranks on several hosts need MASTER_ADDR and MASTER_PORT)", spec->rank,
                   static_cast<long long>(deadline.budget_ms()), path.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

Status make_unique_id(accord_unique_id_t* id, bool for_other_hosts) {
  Settings settings;
  ACCORD_TRY(load_settings(&settings));
  Secret secret;
  ACCORD_TRY(random_bytes(secret.data(), secret.size()));
  std::string bind = settings.bootstrap_addr;
  if (bind.empty() && for_other_hosts) {
    LocalInterface li;
    ACCORD_TRY(choose_local_address(settings.socket_ifname, nullptr, &li)
                   .prefix("rank 0: choosing the bootstrap address for ranks on other hosts: "));
    bind = li.addr.to_string();
    LOG_INFO(kInit, "bootstrap server on %s (%s) for ranks on other hosts", bind.c_str(), li.name.c_str());
  }
  StoreEndpoint endpoint;
  ACCORD_TRY(start_server(bind, 0, secret, settings.init_timeout_ms, &endpoint));
  encode_unique_id(endpoint, id->internal);
  return Status::success();
}

void LaunchCleanup::run() {
  if (!file_.empty()) unlink(file_.c_str());
}

Status spec_from_environment(InitSpec* spec, LaunchCleanup* cleanup) {
  const char* source = nullptr;
  if (env("RANK") != nullptr || env("WORLD_SIZE") != nullptr) {
    if (env("RANK") == nullptr)
      return error(ACCORD_ERR_INVALID_ARGUMENT, "WORLD_SIZE is set but RANK is not; the launcher must set both");
    ACCORD_TRY(parse_rank_env("RANK", "WORLD_SIZE", &spec->rank, &spec->nranks));
    source = "RANK/WORLD_SIZE";
  } else if (env("OMPI_COMM_WORLD_RANK") != nullptr) {
    ACCORD_TRY(parse_rank_env("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", &spec->rank, &spec->nranks));
    source = "Open MPI";
  } else if (env("PMI_RANK") != nullptr) {
    ACCORD_TRY(parse_rank_env("PMI_RANK", "PMI_SIZE", &spec->rank, &spec->nranks));
    source = "PMI";
  } else if (env("SLURM_PROCID") != nullptr) {
    ACCORD_TRY(parse_rank_env("SLURM_PROCID", "SLURM_NTASKS", &spec->rank, &spec->nranks));
    source = "Slurm";
  } else {
    spec->rank = 0;
    spec->nranks = 1;
    LOG_INFO(kInit, "no launcher environment found: running as a single rank");
    return Status::success();
  }
  LOG_INFO(kInit, "rank %d of %d from the %s environment", spec->rank, spec->nranks, source);
  if (spec->nranks == 1) return Status::success();
  const char* addr = env("MASTER_ADDR");
  const char* port = env("MASTER_PORT");
  if (addr == nullptr && port == nullptr) return rendezvous_by_file(spec, cleanup);
  if (addr == nullptr || port == nullptr)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: %s is set but %s is not; set both to rank 0's address and a "
                 "free port", spec->rank, addr ? "MASTER_ADDR" : "MASTER_PORT", addr ? "MASTER_PORT" : "MASTER_ADDR");
  char* end = nullptr;
  long p = std::strtol(port, &end, 10);
  if (*end != '\0' || p < 1 || p > 65535)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "MASTER_PORT='%s' is not a port number (1..65535)", port);
  const Secret secret = !spec->settings.secret.empty()
                            ? secret_from_text("accord-secret:" + spec->settings.secret)
                            : secret_from_text(std::string("accord-env:") + addr + ":" + port + ":" +
                                               std::to_string(spec->nranks) + ":" +
                                               (env("TORCHELASTIC_RUN_ID") ? env("TORCHELASTIC_RUN_ID") : ""));
  if (spec->rank == 0) {
    std::string bind = spec->settings.bootstrap_addr.empty() ? std::string(addr) : spec->settings.bootstrap_addr;
    ACCORD_TRY(start_server(bind, static_cast<uint16_t>(p), secret, spec->settings.init_timeout_ms, &spec->endpoint));
  }
  spec->endpoint.secret = secret;
  return parse_address(addr, static_cast<uint16_t>(p), &spec->endpoint.addr);
}

}  // namespace accord
