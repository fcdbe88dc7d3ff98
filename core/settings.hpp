// Every ACCORD_* environment variable, declared once in a table (settings.cpp: name, type,
// default, one line of help), read once into a Settings value when a communicator is created,
// printed at ACCORD_LOG=info and listed by `accord-topo --help-env`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace accord {

struct Settings {
  // Reliability
  int64_t timeout_ms = 300000;       // ACCORD_TIMEOUT_MS
  int64_t init_timeout_ms = 60000;   // ACCORD_INIT_TIMEOUT_MS
  bool check = false;                // ACCORD_CHECK
  // Algorithms and tuning
  std::string algo;                  // ACCORD_ALGO (empty = tuner decides)
  int64_t chunk_bytes = 0;           // ACCORD_CHUNK_BYTES (0 = tuner decides)
  std::string tune_file;             // ACCORD_TUNE_FILE
  int64_t net_mbps = 10000;          // ACCORD_NET_MBPS: host link speed for the tuner's multi-host model
  int64_t nt_threshold_bytes = 0;    // ACCORD_NT_THRESHOLD (0 = built-in)
  bool single_copy = true;           // ACCORD_SINGLE_COPY (Note [Single copy])
  int64_t single_copy_min = 0;       // ACCORD_SINGLE_COPY_MIN (0 = built-in)
  int64_t single_copy_max = 0;       // ACCORD_SINGLE_COPY_MAX (0 = built-in)
  // Shared memory transport
  int64_t shm_slot_bytes = 0;        // ACCORD_SHM_SLOT_BYTES (0 = built-in)
  int64_t shm_nslots = 0;            // ACCORD_SHM_NSLOTS (0 = built-in)
  int64_t spin_us = -1;              // ACCORD_SPIN_US (-1 = by oversubscription)
  int64_t long_yield_us = 500;       // ACCORD_LONG_YIELD_US (transport/wait.hpp kLongYieldUs)
  bool cpu_move = true;              // ACCORD_CPU_MOVE (its help's 2 ms: transport/wait.hpp kMoveOffYieldNs)
  bool shm_disable = false;          // ACCORD_SHM_DISABLE
  // Bootstrap and network
  std::string bootstrap_addr;        // ACCORD_BOOTSTRAP_ADDR
  std::string bootstrap_dir;         // ACCORD_BOOTSTRAP_DIR
  std::string socket_ifname;         // ACCORD_SOCKET_IFNAME
  int64_t socket_nsocks = 0;         // ACCORD_SOCKET_NSOCKS
  std::string host_id;               // ACCORD_HOST_ID
  std::string secret;                // ACCORD_SECRET (never logged)
  // Topology and devices
  std::string topo_file;             // ACCORD_TOPO_FILE
  std::string topo_dump_file;        // ACCORD_TOPO_DUMP_FILE
  std::string sim_topo;              // ACCORD_SIM_TOPO
  bool p2p_disable = false;          // ACCORD_P2P_DISABLE
  int64_t device = -1;               // ACCORD_DEVICE (-1 = local rank % devices)
  int64_t gpu_blocks = 16;           // ACCORD_GPU_BLOCKS
  std::string device_proto;          // ACCORD_DEVICE_PROTO (empty = auto)
  int64_t direct_scratch_bytes = 0;  // ACCORD_DIRECT_SCRATCH_BYTES (0 = built-in)
  int64_t staged_bytes = 0;          // ACCORD_STAGED_BYTES (0 = built-in)
  int64_t device_p2p_bytes = 0;      // ACCORD_DEVICE_P2P_BYTES (0 = built-in; Note [Point-to-point FIFOs])
  int64_t p2p_copy_min_bytes = 65536;  // ACCORD_P2P_COPY_MIN_BYTES (-1 = never; Note [Copy-engine messages])
  // ACCORD_DIRECT_POINTER_MIN_BYTES (-1 = never; Note [Inputs read where they lie])
  int64_t direct_pointer_min_bytes = int64_t{4} << 20;
  std::string shared_gpu_sync;       // ACCORD_SHARED_GPU_SYNC (empty = auto; Note [Shared GPU sync])
  bool sim_throttle = false;         // ACCORD_SIM_THROTTLE
  int64_t sim_stall_ms = 60000;      // ACCORD_SIM_STALL_MS (Note [Simulated CUDA rules])
  int64_t sim_timeslice_us = 0;      // ACCORD_SIM_TIMESLICE_US (Note [Simulated time slices])
  // Testing
  std::string fault;                 // ACCORD_FAULT (core/fault.hpp)
};

struct SettingInfo {
  const char* name;
  const char* type;
  const char* default_value;
  const char* help;
};

// The table, in display order.
const std::vector<SettingInfo>& setting_table();

// Parses the environment. Bad values are an error naming the variable and what it accepts
// (the first one). *out is written either way, each bad value left at its default, so that a
// rank whose settings are wrong can still meet the others to tell them (Note [A rank that
// fails alone at init]).
Status load_settings(Settings* out);

// Logs every variable and its value at info level (secrets masked).
void log_settings(const Settings& s);

// Text for --help-env.
std::string settings_help();

// Note [Settings every rank shares]: the settings that shape the messages of a collective
// (which algorithm, how it is cut into chunks, the FIFOs' shape, the tuner's inputs, whether
// arguments are exchanged first, how GPU pairs are routed). Ranks that differ in one of them
// plan different schedules and would wait for messages that never come, so communicator init
// compares them across ranks and fails on every rank, naming the setting, when they differ.
struct SharedSetting {
  const char* name;
  std::string value;  // as the log prints it
};
std::vector<SharedSetting> shared_settings(const Settings& s);

// Parse "64K", "1M", "2G", "123" (binary multiples). Returns false on garbage.
bool parse_size(const char* text, int64_t* out);

}  // namespace accord
