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

// Holds a handle's impl alive for the duration of one call (abort waits for it).
class CallGuard {
 public:
  explicit CallGuard(accord_comm* h) : h_(h) {
    if (h_ != nullptr) h_->active_calls.fetch_add(1, std::memory_order_seq_cst);
  }
  ~CallGuard() {
    if (h_ != nullptr) h_->active_calls.fetch_sub(1, std::memory_order_seq_cst);
  }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

 private:
  accord_comm* h_;
};

}  // namespace accord
