// Communicator handles behind accord_comm_t and the last-error bookkeeping of the C API.
//
// A handle is never freed while the process runs: destroy marks it dead and frees the
// communicator, so a later call with the stale handle returns ACCORD_ERR_INVALID_USAGE instead
// of touching freed memory. Dead handles are reused for new communicators only after 4096
// others, keeping the table bounded for programs that create communicators in a loop.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "collectives/communicator.hpp"
#include "core/status.hpp"
#include "transport/wait.hpp"

struct accord_comm {
  std::atomic<uint64_t> magic{0};
  std::atomic<int> active_calls{0};  // calls inside impl right now (abort waits for them)
  std::unique_ptr<accord::Communicator> impl;
  std::string last_error;
};

namespace accord {

constexpr uint64_t kLiveMagic = 0x6163636f72644c56ULL;      // "accordLV"
constexpr uint64_t kAbortingMagic = 0x6163636f72644142ULL;  // "accordAB": being torn down

accord_comm* new_handle(std::unique_ptr<Communicator> impl);
void retire_handle(accord_comm* h);

// Records the error (on the handle if any, and on the thread) and returns its code.
accord_status_t report(accord_comm* h, const Status& s);

// Validates a handle; on failure records the reason on the thread.
bool live(accord_comm* h, const char* function, accord_status_t* code);

// Note [Calls in flight]: accord_comm_abort may run on another thread while calls are inside
// the communicator, and it must not free the communicator under them. Each call says it is
// inside before it checks that the handle is live, and abort marks the handle dead before it
// looks for calls inside, so one of the two always sees the other. That is the store-then-load
// pattern on both sides, which needs a full barrier on each (x86 lets a load pass an earlier
// store). A locked increment and decrement of a counter on the handle did it and cost a 2-rank
// 8 B all-reduce about 20 ns of 0.21 us (Intel Xeon VM), on every call.
//
// So a call stores the handle into its thread's slot (a plain store, no barrier), and abort,
// which is rare, pays for both sides: after marking the handle dead it has the kernel run a
// barrier on every thread of the process (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), as
// userspace RCU does), then waits until no thread's slot holds the handle. Every call either
// runs its check after that barrier (and sees the handle dead) or made its slot store visible
// before it (and abort sees it). Where membarrier is missing or refused (seccomp, kernels before
// 4.14), and under ThreadSanitizer, which does not know it, a call fences after its store. A
// thread has one slot; a call made while it is taken (a group end holds one guard per
// communicator) counts itself on the handle's counter instead, with locked operations.
struct CallSlot {
  std::atomic<accord_comm*> comm{nullptr};  // the handle a call of this thread is inside
  std::atomic<bool> taken{false};           // owned by a live thread
};

// This thread's slot, registered on its first call and given back when it exits.
CallSlot* this_thread_call_slot();
// Set once the process registered for membarrier: then a call's slot store needs no fence.
extern std::atomic<bool> g_abort_fences_calls;
// For abort, after it marked `h` dead: the barrier of Note [Calls in flight], then whether any
// call is still inside `h`.
void fence_calls_in_flight();
bool calls_in_flight(const accord_comm* h);

// Holds a handle's impl alive for the duration of one call (abort waits for it).
class CallGuard {
 public:
  explicit CallGuard(accord_comm* h) : h_(h) {
    if (h_ == nullptr) return;
    CallSlot* slot = this_thread_call_slot();
    if (slot->comm.load(std::memory_order_relaxed) == nullptr) {
      slot->comm.store(h_, std::memory_order_relaxed);
      if (g_abort_fences_calls.load(std::memory_order_relaxed))
        std::atomic_signal_fence(std::memory_order_seq_cst);  // the compiler's order only
      else
        full_fence();  // transport/wait.hpp, Note [Fence without mfence]
      slot_ = slot;
    } else {
      h_->active_calls.fetch_add(1, std::memory_order_seq_cst);
    }
  }
  ~CallGuard() {
    if (slot_ != nullptr)
      slot_->comm.store(nullptr, std::memory_order_release);
    else if (h_ != nullptr)
      h_->active_calls.fetch_sub(1, std::memory_order_seq_cst);
  }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

 private:
  accord_comm* h_;
  CallSlot* slot_ = nullptr;
};

}  // namespace accord
