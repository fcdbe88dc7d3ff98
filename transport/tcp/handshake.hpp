// Authenticated TCP connections between the ranks of one job.
//
// Every data socket starts with a challenge-response over the job secret (the 32 bytes of
// StoreEndpoint::secret), so that a stranger who finds the port cannot inject data and an
// Accord process of another job cannot join by mistake:
//   acceptor  -> connector:  "ACT1" nonce_a[16]
//   connector -> acceptor:   "ACT2" version rank peer nranks sock nsocks slot_bytes (u32 each)
//                            nonce_c[16] mac_c[32]
//                            mac_c = HMAC(secret, "accord-tcp-connect" nonce_a fields nonce_c)
//   acceptor  -> connector:  "ACT3" mac_a[32],  mac_a = HMAC(secret, "accord-tcp-accept" nonce_c nonce_a)
// Both nonces are fresh, so a recorded handshake cannot be replayed; macs are compared in
// constant time. The acceptor serves any number of half-open connections at once, each with
// its own one-second limit, so garbage, a wrong mac or a silent connection is dropped without
// delaying the ranks that do prove the secret.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <vector>

#include "core/clock.hpp"
#include "core/status.hpp"
#include "transport/bootstrap/store.hpp"
#include "transport/socket.hpp"

namespace accord {

// What a connecting rank says about the socket it opens.
struct TcpHello {
  int32_t rank = -1;     // the connector
  int32_t peer = -1;     // the acceptor it wants
  int32_t nranks = 0;
  uint32_t sock = 0;     // index of this socket within the pair
  uint32_t nsocks = 1;   // sockets the connector opens to this acceptor
  uint32_t slot_bytes = 0;
};

// Opens socket `hello.sock` to the acceptor at `addr` and authenticates both ways.
Status tcp_connect_authenticated(const SockAddr& addr, const Secret& secret, const TcpHello& hello,
                                 Deadline deadline, Fd* out);

struct AcceptResult {
  std::map<int, std::vector<Fd>> sockets;  // by connecting rank, index = socket number
  int dropped = 0;                         // connections that failed authentication or timed out
};

// Accepts until every rank in `expect_from` has connected all the sockets it announced.
// Stops early with ACCORD_ERR_ABORTED when *stop becomes true (the caller's own connects failed).
Status tcp_accept_authenticated(int listen_fd, const Secret& secret, int rank, int nranks, uint32_t slot_bytes,
                                const std::vector<int>& expect_from, Deadline deadline,
                                const std::atomic<bool>* stop, AcceptResult* out);

}  // namespace accord
