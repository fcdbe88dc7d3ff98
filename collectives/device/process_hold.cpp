// The device memory of one process's ranks of a job, freed by the last to let go
// (process_hold.hpp; Note [Freeing memory peers map] in collectives/device/engine.cpp).
#include "collectives/device/process_hold.hpp"

#include <map>
#include <mutex>

namespace accord::dev {

namespace {
std::mutex g_mu;
// By key, until the last rank lets go: a rank that joins late (after a sibling of a job whose
// init it shares already let go) still finds the hold.
std::map<std::string, std::shared_ptr<ProcessHold>> g_holds;
}  // namespace

std::shared_ptr<ProcessHold> ProcessHold::join(const std::string& key, int ranks, DeviceRuntime* rt) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::shared_ptr<ProcessHold>& h = g_holds[key];
  if (h == nullptr) {
    h = std::make_shared<ProcessHold>();
    h->key_ = key;
    h->rt_ = rt;
    h->live_ = ranks;
  }
  return h;
}

bool ProcessHold::let_go(const std::vector<void*>& memory) {
  std::lock_guard<std::mutex> lock(g_mu);
  memory_.insert(memory_.end(), memory.begin(), memory.end());
  if (--live_ > 0) return false;
  // The key may be reused by a later job once this hold is gone (a scratch address is).
  auto it = g_holds.find(key_);
  if (it != g_holds.end() && it->second.get() == this) g_holds.erase(it);
  return true;
}

void ProcessHold::free_all() {
  std::vector<void*> memory;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    memory.swap(memory_);
  }
  for (void* p : memory) (void)rt_->free_device(p);
}

}  // namespace accord::dev
