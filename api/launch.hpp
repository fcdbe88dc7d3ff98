// How a job finds its bootstrap server: from a unique id, or from the launcher's environment
// (torchrun-style MASTER_ADDR/MASTER_PORT, mpirun, PMI, Slurm).
#pragma once

#include <string>

#include "collectives/communicator.hpp"
#include "core/status.hpp"
#include "include/accord/accord.h"

namespace accord {

// Starts a bootstrap server in this process and describes it in `id`. It listens on
// ACCORD_BOOTSTRAP_ADDR if set, else on loopback, or, with `for_other_hosts`, on the address
// the TCP transport would pick (ACCORD_SOCKET_IFNAME, else the first non-loopback interface).
Status make_unique_id(accord_unique_id_t* id, bool for_other_hosts = false);

// Work to do once init has finished, successfully or not (rank 0 removes the rendezvous file).
class LaunchCleanup {
 public:
  void remove_file_after_init(std::string path) { file_ = std::move(path); }
  void run();

 private:
  std::string file_;
};

// Fills rank, nranks and endpoint from the environment (spec->settings must be loaded).
Status spec_from_environment(InitSpec* spec, LaunchCleanup* cleanup);

}  // namespace accord
