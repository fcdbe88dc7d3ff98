// Fault injection for the reliability tests (ACCORD_FAULT; never set it in production).
//
//   ACCORD_FAULT=POINT:RANK[:how=kill|abort|exit|stop][:seq=N][:step=K]
//
// POINT is where rank RANK misbehaves: init.connected (after joining the bootstrap store),
// init.shm_published (shared memory created and announced, not yet unlinked), coll (inside
// collective number N, before schedule step K), destroy. how: kill = SIGKILL, abort =
// abort(), exit = exit(1), stop = SIGSTOP (a hung process).
#pragma once

#include <string>

#include "core/status.hpp"

namespace accord {

struct FaultPlan {
  std::string point;  // empty: no fault
  int rank = -1;
  std::string how = "kill";
  long seq = 1;
  long step = 0;

  bool at(const char* p, int r) const { return !point.empty() && point == p && rank == r; }
};

Status parse_fault(const std::string& spec, FaultPlan* out);

// Misbehaves as the plan says. Does not return unless how=stop and the process is continued.
void trigger_fault(const FaultPlan& plan);

}  // namespace accord
