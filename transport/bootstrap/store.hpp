// Bootstrap key-value store: set, get (waits for the key, with a deadline). Ranks use it only
// while a communicator is being created, to exchange addresses and shared-memory names.
//
// One server per job runs in a background thread of the process that called
// accord_get_unique_id (or of rank 0 for environment launches). Every connection proves it
// knows the job secret (HMAC-SHA256 over a fresh server nonce, constant-time compare) and the
// server proves it back; strangers, garbage and idle connections are dropped within 1 s.
// The server also checks that every rank agrees on nranks and that no rank joins twice, and
// then turns every later get into that error, so all ranks learn it instead of timing out.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "core/status.hpp"
#include "transport/socket.hpp"

namespace accord {

using Secret = std::array<uint8_t, 32>;

struct StoreEndpoint {
  SockAddr addr;
  Secret secret{};
};

class StoreServer;

// Starts a server on endpoint->addr (port 0: any free port; the chosen port is written back).
// The server thread lives until every rank of the job has connected and disconnected, or
// until nobody has been connected for `linger_ms`.
Status start_store_server(StoreEndpoint* endpoint, int64_t linger_ms);

// Note [A rank that fails alone at init]: a rank whose init fails for a reason of its own
// (a bad setting, a tune file it cannot read, a GPU it cannot use) still joins the store and
// reports why, so every other rank fails at once with that reason instead of waiting
// ACCORD_INIT_TIMEOUT_MS for it. And the process that runs the store (rank 0, typically)
// stays in its failed init until every rank has joined and been told, or the init deadline
// passed: a process that returned and exited would take the store with it, and ranks starting
// later would wait for a server that is gone. It does not wait for a job whose ranks disagree
// on nranks or on their numbers: which ranks would still come is unknown. The server itself
// answers a failed job as long as a starting job waits (its linger, the init timeout), no
// longer 2 s.
//
// If this process runs the store of `endpoint`'s job, waits until that server has ended
// (every rank came and left) or the deadline; else returns at once.
void wait_for_store_server(const StoreEndpoint& endpoint, int rank, Deadline deadline);
// How many bootstrap servers this process runs now (tests: a fork must not meet their threads).
int store_servers_running();

class StoreClient {
 public:
  // Connects and authenticates as `rank` of `nranks`, retrying until the deadline.
  static Status connect(const StoreEndpoint& endpoint, int rank, int nranks, Deadline deadline,
                        std::unique_ptr<StoreClient>* out);
  ~StoreClient();

  Status set(const std::string& key, const std::string& value);
  // Waits until the key exists. `what` names who should set it, for the timeout message
  // ("rank 3").
  Status get(const std::string& key, std::string* value, Deadline deadline, const std::string& what);

  // Tells the server this rank's init finished; closing without it means this rank failed.
  Status finish();
  // Tells the server (and so every rank still waiting) why this rank's init failed.
  void report_failure(const Status& why);

  // Every rank sets prefix/rank = mine; returns all values in rank order.
  Status all_gather(const std::string& prefix, int rank, int nranks, const std::string& mine,
                    std::vector<std::string>* all, Deadline deadline);

 private:
  StoreClient() = default;
  Fd fd_;
  int rank_ = -1;
  std::string server_;  // for messages
};

// Unique id <-> endpoint. The id's 128 bytes hold a magic, the address and the secret.
void encode_unique_id(const StoreEndpoint& endpoint, char out[ACCORD_UNIQUE_ID_BYTES]);
Status decode_unique_id(const char in[ACCORD_UNIQUE_ID_BYTES], StoreEndpoint* out);

}  // namespace accord
