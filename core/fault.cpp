// ACCORD_FAULT parsing and triggering (see fault.hpp).
#include "core/fault.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "core/log.hpp"

namespace accord {

Status parse_fault(const std::string& spec, FaultPlan* out) {
  FaultPlan p;
  if (spec.empty()) {
    *out = p;
    return Status::success();
  }
  std::stringstream ss(spec);
  std::string item;
  int index = 0;
  while (std::getline(ss, item, ':')) {
    if (index == 0) {
      p.point = item;
    } else if (index == 1) {
      p.rank = std::atoi(item.c_str());
    } else if (item.rfind("how=", 0) == 0) {
      p.how = item.substr(4);
    } else if (item.rfind("seq=", 0) == 0) {
      p.seq = std::atol(item.c_str() + 4);
    } else if (item.rfind("step=", 0) == 0) {
      p.step = std::atol(item.c_str() + 5);
    } else {
      return error(ACCORD_ERR_INVALID_ARGUMENT, "ACCORD_FAULT='%s': unknown item '%s'", spec.c_str(), item.c_str());
    }
    ++index;
  }
  if (p.point != "init.connected" && p.point != "init.shm_published" && p.point != "coll" && p.point != "destroy")
    return error(ACCORD_ERR_INVALID_ARGUMENT, "ACCORD_FAULT='%s': unknown point '%s'", spec.c_str(), p.point.c_str());
  if (p.how != "kill" && p.how != "abort" && p.how != "exit" && p.how != "stop")
    return error(ACCORD_ERR_INVALID_ARGUMENT, "ACCORD_FAULT='%s': how must be kill, abort, exit or stop", spec.c_str());
  *out = p;
  return Status::success();
}

void trigger_fault(const FaultPlan& plan) {
  LOG_WARN(kCore, "ACCORD_FAULT: rank %d injects '%s' at %s", plan.rank, plan.how.c_str(), plan.point.c_str());
  if (plan.how == "kill") raise(SIGKILL);
  if (plan.how == "abort") abort();
  if (plan.how == "exit") exit(1);
  if (plan.how == "stop") raise(SIGSTOP);
}

}  // namespace accord
