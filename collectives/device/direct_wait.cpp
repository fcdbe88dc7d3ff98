// The host side of the waiting protocol (Note [Waiting protocol], direct_call.hpp): a direct
// call as one kernel per phase of each round, the hand-offs between them done by the stream
// (stream_write_value32 into every peer's scratch, stream_wait_value32 on this rank's), and
// the watchdog's way out of a wait on a peer that died.
//
// Cost: 1 + rounds (phases - 1) kernels a call (a round's last phase and the next round's
// first share one), and, per exchange, nranks - 1
// writes into the peers, nranks - 1 writes of DevCtl::waiting_peer and nranks - 1 waits on the
// caller's stream; the data moved is the spinning form's.
#include <algorithm>

#include "collectives/device/dev_kernels.hpp"
#include "collectives/device/direct.hpp"
#include "collectives/device/direct_call.hpp"
#include "core/log.hpp"

namespace accord::dev {

Status DirectEngine::launch_waiting(const DevLaunch& launch, Stream stream, bool* partial) {
  *partial = false;
  DevLaunch l = launch;
  DevDirect& d = l.direct;
  const uint64_t rounds = direct_rounds(d);
  if (rounds == 0) {  // nothing to move: one kernel that only says it began and ended
    d.phase = 0;
    d.last = 1;
    return launch_phase(l, stream);
  }
  const uint32_t phases = direct_phases(d.coll, d.proto);
  // The exchange after phase p of round e: this rank's word in every peer's scratch, then
  // every peer's word in this rank's (a wait for round >= e: a peer may be a round ahead).
  auto exchange = [&](uint32_t p, uint32_t e) {
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_) continue;
      Status s = rt_->stream_write_value32(
          stream, direct_wait_word(scratch_[static_cast<size_t>(r)], nranks_, p, rank_), e);
      if (!s.ok()) return s.prefix(format("round %u: telling rank %d: ", e, r));
    }
    // Before the waits are queued: release_waits must reach past them.
    waited_round_.store(e, std::memory_order_release);
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_) continue;
      // The peer this stream waits on next, for the watchdog's message (as a spinning
      // kernel says after a long wait): DevCtl is pinned host memory the host reads freely.
      Status s =
          rt_->stream_write_value32(stream, &l.call.ctl->waiting_peer, static_cast<uint32_t>(r));
      if (!s.ok()) return s.prefix(format("round %u: ", e));
      s = rt_->stream_wait_value32(
          stream, direct_wait_word(scratch_[static_cast<size_t>(rank_)], nranks_, p, r), e,
          DeviceRuntime::WaitCondition::kGeq);
      if (!s.ok()) return s.prefix(format("round %u: waiting for rank %d: ", e, r));
    }
    return Status::success();
  };
  for (uint64_t k = 0; k < rounds; ++k) {
    const uint32_t e = d.round + static_cast<uint32_t>(k);
    d.phase_round = static_cast<uint32_t>(k);
    // Phase 0 of every round after the first ran in the kernel of the round before's last
    // phase (DevDirect::then_next).
    for (uint32_t p = k == 0 ? 0 : 1; p < phases; ++p) {
      if (p > 0) ACCORD_TRY(exchange(p - 1, e));
      d.phase = p + 1;
      d.last = k == rounds - 1 && p == phases - 1 ? 1 : 0;
      d.then_next = k + 1 < rounds && p == phases - 1 ? 1 : 0;
      ACCORD_TRY(launch_phase(l, stream).prefix(format("round %u, phase %u: ", e, p)));
      *partial = true;
    }
  }
  return Status::success();
}

// One kernel of a call cut into phases (the waiting and staged forms): `l` says which.
Status DirectEngine::launch_phase(const DevLaunch& l, Stream stream) {
  return rt_->launch_kernel(collective_kernel(), &l, sizeof l, stream, l.call.nblocks, 0);
}

void DirectEngine::release_waits() {
  if (staged_) release_staged();  // Note [Staged protocol] (direct_staged.cpp): host words, first
  if (rescue_.id == 0) return;  // the spinning form, or the staged one (host words, raised above)
  const uint32_t e = waited_round_.load(std::memory_order_acquire);
  if (e == 0) return;  // no wait was ever queued
  for (uint32_t p = 0; p + 1 < kDirectMaxPhases; ++p)  // every exchange any form makes
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_) continue;
      Status s = rt_->stream_write_value32(
          rescue_, direct_wait_word(scratch_[static_cast<size_t>(rank_)], nranks_, p, r), e);
      if (!s.ok()) {
        LOG_WARN(kGpu, "rank %d: ending the stream's wait for rank %d's round %u failed: %s", rank_,
                 r, e, s.message().c_str());
        return;
      }
    }
}

}  // namespace accord::dev
