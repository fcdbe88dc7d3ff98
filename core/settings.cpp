// The environment variable table and its parser (see settings.hpp).
#include "core/settings.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/log.hpp"

namespace accord {
namespace {

enum class Kind { kInt, kSize, kBool, kString };

struct Entry {
  SettingInfo info;
  Kind kind;
  int64_t Settings::*int_field;
  bool Settings::*bool_field;
  std::string Settings::*string_field;
  bool secret;
};

#define INT_ENTRY(name, field, def, help) \
  Entry{{name, "int", def, help}, Kind::kInt, &Settings::field, nullptr, nullptr, false}
#define SIZE_ENTRY(name, field, def, help) \
  Entry{{name, "size", def, help}, Kind::kSize, &Settings::field, nullptr, nullptr, false}
#define BOOL_ENTRY(name, field, def, help) \
  Entry{{name, "bool", def, help}, Kind::kBool, nullptr, &Settings::field, nullptr, false}
#define STR_ENTRY(name, field, def, help) \
  Entry{{name, "string", def, help}, Kind::kString, nullptr, nullptr, &Settings::field, false}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> kEntries = {
      Entry{{"ACCORD_LOG", "string", "warn", "log level, globally and per category: info,topo:debug"},
            Kind::kString, nullptr, nullptr, nullptr, false},
      Entry{{"ACCORD_LOG_FILE", "string", "", "write log lines to this file (%h host, %p pid)"},
            Kind::kString, nullptr, nullptr, nullptr, false},
      Entry{{"ACCORD_KERNEL_ISA", "string", "",
             "force the host reduction kernels: sse2, avx2, avx512 (read by collectives/kernels)"},
            Kind::kString, nullptr, nullptr, nullptr, false},
      Entry{{"ACCORD_SLOT_COPY", "string", "rep",
             "how messages are copied into shared-memory FIFO slots: rep (rep movsb) or vector "
             "(read by collectives/kernels)"},
            Kind::kString, nullptr, nullptr, nullptr, false},
      INT_ENTRY("ACCORD_TIMEOUT_MS", timeout_ms, "300000",
                "deadline for any wait inside a collective; then ACCORD_ERR_TIMEOUT"),
      INT_ENTRY("ACCORD_INIT_TIMEOUT_MS", init_timeout_ms, "60000",
                "deadline for every rank to arrive at communicator init"),
      BOOL_ENTRY("ACCORD_CHECK", check, "0",
                 "compare count, dtype, op and root across ranks before each collective"),
      STR_ENTRY("ACCORD_ALGO", algo, "", "force an all-reduce algorithm: ring, tree, direct, rd, hier (empty: the tuner picks)"),
      SIZE_ENTRY("ACCORD_CHUNK_BYTES", chunk_bytes, "0",
                 "largest pipeline chunk (0: 64 KiB on host buffers with every rank on one host, else the slot size; the tuner may pick less); K/M/G suffixes"),
      STR_ENTRY("ACCORD_TUNE_FILE", tune_file, "", "times measured by bench/calibrate.sh for the tuner (empty: built-in model)"),
      INT_ENTRY("ACCORD_NET_MBPS", net_mbps, "10000",
                "speed of each host's network link in Mbit/s, for the tuner's choice across hosts"),
      SIZE_ENTRY("ACCORD_NT_THRESHOLD", nt_threshold_bytes, "0",
                 "message size from which out-of-place outputs are written with streaming "
                 "(non-temporal) stores (0: 4 MiB if the probe at init finds them faster on this "
                 "host, else never; the init log says which)"),
      BOOL_ENTRY("ACCORD_SINGLE_COPY", single_copy, "1",
                 "all-reduces, all-gathers, broadcasts and reduce-scatters of host buffers between "
                 "processes of one host copy each byte once, "
                 "reading and writing the peers' buffers by process_vm_readv/writev, where the probe "
                 "at init finds every rank can (0: through the shared-memory FIFOs)"),
      SIZE_ENTRY("ACCORD_SINGLE_COPY_MIN", single_copy_min, "0",
                 "smallest call that takes the single copy (ACCORD_SINGLE_COPY; count times element "
                 "size: an all-gather's input, a reduce-scatter's output; 0: 16 KiB, or 256 KiB "
                 "where the host's ranks outnumber their CPUs; broadcasts and reduce-scatters from "
                 "64 KiB whatever it says)"),
      SIZE_ENTRY("ACCORD_SINGLE_COPY_MAX", single_copy_max, "0",
                 "largest call that takes the single copy, also for an all-gather's whole output and "
                 "a reduce-scatter's whole input (0: 32 MiB divided by the number of ranks, 16 MiB "
                 "for 2; above it, out of place, the FIFOs were faster where measured)"),
      SIZE_ENTRY("ACCORD_SHM_SLOT_BYTES", shm_slot_bytes, "0", "bytes per shared-memory FIFO slot"),
      INT_ENTRY("ACCORD_SHM_NSLOTS", shm_nslots, "0", "slots per shared-memory FIFO"),
      INT_ENTRY("ACCORD_SPIN_US", spin_us, "-1",
                "microseconds to spin before sleeping (-1: 200, then up to 10 ms while every "
                "runnable task has a CPU; none when oversubscribed)"),
      INT_ENTRY("ACCORD_LONG_YIELD_US", long_yield_us, "500",
                "when oversubscribed, two yields longer than this close together make a rank sleep "
                "instead of yielding for a while (microseconds; 0: never)"),
      BOOL_ENTRY("ACCORD_CPU_MOVE", cpu_move, "1",
                 "when oversubscribed, a rank whose yield took 2 ms or more (and over "
                 "ACCORD_LONG_YIELD_US) moves off that CPU at once (its thread's affinity mask is "
                 "narrowed and put back; 0: never)"),
      BOOL_ENTRY("ACCORD_SHM_DISABLE", shm_disable, "0",
                 "no shared memory: TCP between all ranks, on one host too (GPU buffers are then "
                 "staged through pinned host memory)"),
      STR_ENTRY("ACCORD_BOOTSTRAP_ADDR", bootstrap_addr, "",
                "address (ip or ip:port) the bootstrap listener binds; default loopback, or "
                "MASTER_ADDR"),
      STR_ENTRY("ACCORD_BOOTSTRAP_DIR", bootstrap_dir, "/tmp",
                "directory for the rendezvous file of launches that give no MASTER_ADDR"),
      STR_ENTRY("ACCORD_SOCKET_IFNAME", socket_ifname, "", "network interface for TCP traffic"),
      INT_ENTRY("ACCORD_SOCKET_NSOCKS", socket_nsocks, "0", "sockets per TCP peer pair (0: auto)"),
      STR_ENTRY("ACCORD_HOST_ID", host_id, "",
                "override the host identity (hostname + boot id); ranks share memory only with "
                "ranks of the same identity and /dev/shm"),
      Entry{{"ACCORD_SECRET", "string", "", "job secret for the bootstrap (default: random per job)"},
            Kind::kString, nullptr, nullptr, &Settings::secret, true},
      STR_ENTRY("ACCORD_TOPO_FILE", topo_file, "", "load the topology from this file instead of probing"),
      STR_ENTRY("ACCORD_TOPO_DUMP_FILE", topo_dump_file, "", "write the detected topology here"),
      STR_ENTRY("ACCORD_SIM_TOPO", sim_topo, "",
                "present simulated GPUs of the machine in this topology file"),
      INT_ENTRY("ACCORD_DEVICE", device, "-1",
                "GPU of this rank (-1: local rank modulo the GPUs, when ACCORD_SIM_TOPO or ACCORD_DEVICE asks for GPUs)"),
      BOOL_ENTRY("ACCORD_P2P_DISABLE", p2p_disable, "0", "never use GPU peer-to-peer; stage through host"),
      INT_ENTRY("ACCORD_GPU_BLOCKS", gpu_blocks, "16",
                "most blocks of a collective kernel (one per 16 KiB of its largest step; 1: one block)"),
      STR_ENTRY("ACCORD_DEVICE_PROTO", device_proto, "auto",
                "GPU collectives between ranks that address each other's GPU memory: auto (direct loads and "
                "stores where every pair can; collectives staged through pinned host memory by copy engines where "
                "some pair cannot, sends and receives on FIFOs), direct, oneshot, twoshot (force a direct form), "
                "staged (force the staged protocol) or fifo"),
      SIZE_ENTRY("ACCORD_DIRECT_SCRATCH_BYTES", direct_scratch_bytes, "0",
                 "GPU memory per rank for the direct protocol, mapped into every peer (0: 8 MiB; a call "
                 "larger than half of it runs in rounds)"),
      SIZE_ENTRY("ACCORD_STAGED_BYTES", staged_bytes, "0",
                 "pinned shared host memory per rank for the staged collectives, where ranks on one host have GPUs "
                 "(0: 4 MiB; each rank also keeps a copy of every rank's halves in its GPU: ranks x this; a call "
                 "larger than half of it runs in rounds)"),
      SIZE_ENTRY("ACCORD_DEVICE_P2P_BYTES", device_p2p_bytes, "0",
                 "GPU memory of each point-to-point FIFO between two ranks that address each other's GPU memory, in "
                 "the receiver's GPU (0: 8 MiB); sends and receives of device buffers go in messages of a quarter of "
                 "it; other pairs' sends and receives use the collectives' FIFOs"),
      INT_ENTRY("ACCORD_P2P_COPY_MIN_BYTES", p2p_copy_min_bytes, "65536",
                "sends and receives of GPU buffers through FIFOs in host memory (host-staged or TCP pairs), where "
                "GPU hand-offs wait: messages of this many bytes or more are moved by copy engines, smaller ones by "
                "the kernel's loads and stores (-1: never by copy engines)"),
      INT_ENTRY("ACCORD_DIRECT_POINTER_MIN_BYTES", direct_pointer_min_bytes, "4194304",
                "ranks that are threads of one process on one GPU (the direct protocol): the peers read a rank's "
                "input where it lies (not from a copy in its scratch) in every two-shot all-reduce, and in the "
                "one-shot all-reduce and the other collectives from this many bytes of input, where one "
                "synchronization more a call costs less than the copy (-1: never; 0: every call)"),
      STR_ENTRY("ACCORD_SHARED_GPU_SYNC", shared_gpu_sync, "auto",
                "GPU hand-offs (the direct protocol's, and every FIFO kernel's: sends, receives, collectives of jobs "
                "on the FIFOs): wait (the stream waits between kernels, which needs no time "
                "slice: processes sharing a GPU without MPS), spin (the kernel polls its peers' flags: fastest when "
                "every rank's kernel runs at once), or auto (wait where processes share a GPU without MPS)"),
      BOOL_ENTRY("ACCORD_SIM_THROTTLE", sim_throttle, "0",
                 "simulated GPUs: copies take at least bytes / the topology's link bandwidth"),
      INT_ENTRY("ACCORD_SIM_STALL_MS", sim_stall_ms, "60000",
                "simulated GPUs: a call that waits for the device to go idle (cudaFree, lazy loading...) fails after this long"),
      INT_ENTRY("ACCORD_SIM_TIMESLICE_US", sim_timeslice_us, "0",
                "simulated GPUs: model a GPU shared by processes without MPS, one process's kernels at a time in "
                "slices of this many us (0: off; the ranks of a communicator on one host share the lowest rank's "
                "table, however they were started; 0 also means no time-slice warning for simulated GPUs)"),
      STR_ENTRY("ACCORD_FAULT", fault, "",
                "testing only: make a rank fail on purpose, POINT:RANK[:how=kill|abort|exit|stop][:seq=N][:step=K]"),
  };
  return kEntries;
}

bool parse_bool(const char* s, bool* out) {
  if (!strcasecmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on")) {
    *out = true;
    return true;
  }
  if (!strcasecmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off") ||
      !*s) {
    *out = false;
    return true;
  }
  return false;
}

bool parse_int(const char* s, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

bool parse_size(const char* text, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || v < 0) return false;
  int64_t mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1LL << 10, ++end;
  else if (*end == 'M' || *end == 'm') mult = 1LL << 20, ++end;
  else if (*end == 'G' || *end == 'g') mult = 1LL << 30, ++end;
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  if (v > INT64_MAX / mult) return false;
  *out = v * mult;
  return true;
}

const std::vector<SettingInfo>& setting_table() {
  static const std::vector<SettingInfo> kTable = [] {
    std::vector<SettingInfo> t;
    for (const Entry& e : entries()) t.push_back(e.info);
    return t;
  }();
  return kTable;
}

Status load_settings(Settings* out) {
  Settings s;
  Status first = Status::success();  // the first bad value; the others keep their defaults
  auto bad = [&first](Status why) {
    if (first.ok()) first = std::move(why);
  };
  for (const Entry& e : entries()) {
    const char* v = std::getenv(e.info.name);
    if (v == nullptr) continue;
    switch (e.kind) {
      case Kind::kInt:
        if (!parse_int(v, &(s.*e.int_field)))
          bad(error(ACCORD_ERR_INVALID_ARGUMENT, "%s='%s' is not an integer; unset it or give e.g. %s=%s",
                    e.info.name, v, e.info.name, e.info.default_value));
        break;
      case Kind::kSize:
        if (!parse_size(v, &(s.*e.int_field)))
          bad(error(ACCORD_ERR_INVALID_ARGUMENT,
                    "%s='%s' is not a size; give bytes with an optional K, M or G suffix (e.g. 512K)",
                    e.info.name, v));
        break;
      case Kind::kBool:
        if (!parse_bool(v, &(s.*e.bool_field)))
          bad(error(ACCORD_ERR_INVALID_ARGUMENT, "%s='%s' is not a boolean; use 0 or 1", e.info.name, v));
        break;
      case Kind::kString:
        if (e.string_field != nullptr) s.*e.string_field = v;
        break;
    }
  }
  if (s.bootstrap_dir.empty()) s.bootstrap_dir = "/tmp";
  const Settings defaults;
  if (s.timeout_ms <= 0) {
    bad(error(ACCORD_ERR_INVALID_ARGUMENT, "ACCORD_TIMEOUT_MS=%lld must be positive",
              static_cast<long long>(s.timeout_ms)));
    s.timeout_ms = defaults.timeout_ms;
  }
  if (s.init_timeout_ms <= 0) {
    bad(error(ACCORD_ERR_INVALID_ARGUMENT, "ACCORD_INIT_TIMEOUT_MS=%lld must be positive",
              static_cast<long long>(s.init_timeout_ms)));
    s.init_timeout_ms = defaults.init_timeout_ms;
  }
  if (s.p2p_copy_min_bytes < -1) {
    bad(error(ACCORD_ERR_INVALID_ARGUMENT, "ACCORD_P2P_COPY_MIN_BYTES=%lld: give a size in bytes (0 or more), or -1 "
              "to keep every message on the kernel", static_cast<long long>(s.p2p_copy_min_bytes)));
    s.p2p_copy_min_bytes = defaults.p2p_copy_min_bytes;
  }
  if (s.direct_pointer_min_bytes < -1) {
    bad(error(ACCORD_ERR_INVALID_ARGUMENT, "ACCORD_DIRECT_POINTER_MIN_BYTES=%lld: give a size in bytes (0 or more), "
              "or -1 to copy every input into the scratch", static_cast<long long>(s.direct_pointer_min_bytes)));
    s.direct_pointer_min_bytes = defaults.direct_pointer_min_bytes;
  }
  *out = std::move(s);
  return first;
}

namespace {

std::string value_text(const Settings& s, const Entry& e) {
  std::string value;
  switch (e.kind) {
    case Kind::kInt:
    case Kind::kSize: value = std::to_string(s.*e.int_field); break;
    case Kind::kBool: value.assign(1, (s.*e.bool_field) ? '1' : '0'); break;
    case Kind::kString: {
      if (e.string_field == nullptr) {
        const char* v = std::getenv(e.info.name);
        value = v ? v : "";
      } else {
        value = s.*e.string_field;
      }
      if (e.secret && !value.empty()) value.assign("(set, not shown)", 16);
      break;
    }
  }
  return value;
}

// Note [Settings every rank shares] (settings.hpp). ACCORD_SHM_DISABLE is not among them: a
// rank without shared memory is remote to every other rank, and they all see it so.
// ACCORD_GPU_BLOCKS neither: each rank's blocks count their own slices (Note [Blocks]).
bool shared(const Entry& e) {
  static const char* const kShared[] = {"ACCORD_ALGO",           "ACCORD_CHUNK_BYTES", "ACCORD_TUNE_FILE",
                                        "ACCORD_NET_MBPS",       "ACCORD_SHM_SLOT_BYTES",
                                        "ACCORD_SHM_NSLOTS",     "ACCORD_CHECK",       "ACCORD_P2P_DISABLE",
                                        "ACCORD_DEVICE_PROTO",   "ACCORD_DIRECT_SCRATCH_BYTES", "ACCORD_STAGED_BYTES",
                                        "ACCORD_DEVICE_P2P_BYTES", "ACCORD_SHARED_GPU_SYNC"};
  for (const char* name : kShared)
    if (std::strcmp(name, e.info.name) == 0) return true;
  return false;
}

}  // namespace

std::vector<SharedSetting> shared_settings(const Settings& s) {
  std::vector<SharedSetting> out;
  for (const Entry& e : entries())
    if (shared(e)) out.push_back({e.info.name, value_text(s, e)});
  return out;
}

void log_settings(const Settings& s) {
  if (!log_enabled(LogLevel::kInfo, LogCat::kEnv)) return;
  for (const Entry& e : entries()) {
    const std::string value = value_text(s, e);
    bool from_env = std::getenv(e.info.name) != nullptr;
    log_message(LogLevel::kInfo, LogCat::kEnv, "%s=%s%s", e.info.name, value.c_str(),
                from_env ? " (from environment)" : "");
  }
}

std::string settings_help() {
  std::string out = "Environment variables read by Accord:\n";
  for (const Entry& e : entries()) {
    const SettingInfo& i = e.info;
    out += format("  %-24s %-6s default '%s'\n      %s%s\n", i.name, i.type, i.default_value, i.help,
                  shared(e) ? " (the same on every rank, or init fails)" : "");
  }
  return out;
}

}  // namespace accord
