// Note [Freeing memory peers map] (collectives/device/engine.cpp): the device memory that the
// ranks of one process in one job let their peers address, kept until the last of them lets go.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/device/device_runtime.hpp"

namespace accord::dev {

// Ranks of one process in one job address each other's device memory by plain pointers (no
// mapping to close, nothing the runtime tracks), and a process often destroys its ranks'
// communicators one after another from one thread (ncclCommDestroy in a loop). So no rank frees
// alone: each hands its memory to the hold as it lets go, and the last of the process's ranks
// in the job frees it all, after waiting (on behalf of all of them) for the other processes'
// ranks to let go. A rank that waited for them itself would deadlock two such processes: each
// would wait, in its first destroy, for a rank of the other that is only destroyed after it.
class ProcessHold {
 public:
  // The hold named `key` in this process (the same key for every rank of this process in the
  // job, unique among live holds), made for `ranks` ranks if it does not exist yet.
  static std::shared_ptr<ProcessHold> join(const std::string& key, int ranks, DeviceRuntime* rt);
  // Takes `memory` (device allocations); true when the caller was the last of the ranks to let
  // go, which then waits for the other processes and calls free_all() (or, if they never let
  // go, does not: the memory stays allocated rather than fault a peer's kernel).
  bool let_go(const std::vector<void*>& memory);
  void free_all();

 private:
  std::string key_;
  DeviceRuntime* rt_ = nullptr;
  int live_ = 0;  // ranks that have not let go
  std::vector<void*> memory_;
};

}  // namespace accord::dev
