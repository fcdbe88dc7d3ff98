// Communicator handles behind accord_comm_t and the last-error bookkeeping of the C API.
//
// A handle is never freed while the process runs: destroy marks it dead and frees the
// communicator, so a later call with the stale handle returns ACCORD_ERR_INVALID_USAGE instead
// of touching freed memory. Dead handles are reused for new communicators only after 4096
// others, keeping the table bounded for programs that create communicators in a loop.
#pragma once

#include <memory>
#include <string>

#include "collectives/communicator.hpp"
#include "core/status.hpp"

struct accord_comm {
  uint64_t magic = 0;
  std::unique_ptr<accord::Communicator> impl;
  std::string last_error;
};

namespace accord {

constexpr uint64_t kLiveMagic = 0x6163636f72644c56ULL;  // "accordLV"

accord_comm* new_handle(std::unique_ptr<Communicator> impl);
void retire_handle(accord_comm* h);

// Records the error (on the handle if any, and on the thread) and returns its code.
accord_status_t report(accord_comm* h, const Status& s);

// Validates a handle; on failure records the reason on the thread.
bool live(accord_comm* h, const char* function, accord_status_t* code);

}  // namespace accord
