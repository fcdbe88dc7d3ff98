// Helpers shared by the TCP transport tests, the two-host test program and the benchmark:
// a bootstrap store on a chosen address, one rank's TCP transport, deterministic payloads
// that each message can check by itself, and send / receive of one whole message.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/crypto.hpp"
#include "transport/bootstrap/store.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace accord::tcptest {

// A store server on `addr` ("127.0.0.1:0" picks a port) with a fresh random secret.
inline Status start_store(const std::string& addr, StoreEndpoint* ep) {
  ACCORD_TRY(parse_address(addr, 0, &ep->addr));
  ACCORD_TRY(random_bytes(ep->secret.data(), ep->secret.size()));
  return start_store_server(ep, 30000);
}

struct Rank {
  std::unique_ptr<StoreClient> store;
  std::unique_ptr<TcpTransport> tcp;
};

// Connects to the store and sets up TCP to every other rank (all remote, as if on other hosts).
inline Status open_rank(const StoreEndpoint& ep, int rank, int nranks, TcpOptions options, Rank* out,
                        int64_t timeout_ms = 10000) {
  Deadline d = Deadline::after_ms(timeout_ms);
  ACCORD_TRY(StoreClient::connect(ep, rank, nranks, d, &out->store));
  std::vector<int> remote;
  for (int r = 0; r < nranks; ++r)
    if (r != rank) remote.push_back(r);
  options.secret = ep.secret;
  options.bootstrap_addr = ep.addr;
  ACCORD_TRY(TcpTransport::setup(out->store.get(), rank, nranks, remote, options, d, &out->tcp));
  return out->store->finish();
}

inline WaitContext wait_ctx(int rank, int peer, int64_t timeout_ms, const std::atomic<bool>* abort = nullptr) {
  WaitContext c;
  c.deadline = Deadline::after_ms(timeout_ms);
  c.abort_flag = abort;
  c.self_rank = rank;
  c.peer_rank = peer;
  c.operation = "tcp_test";
  return c;
}

// Payload of message `seq`: 64-bit words from a counter-based mix, so any byte checks alone.
inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}
inline void fill(void* p, size_t bytes, uint64_t seq) {
  uint8_t* b = static_cast<uint8_t*>(p);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t v = mix(seq * 0x9E3779B97F4A7C15ULL + i);
    std::memcpy(b + i, &v, 8);
  }
  for (; i < bytes; ++i) b[i] = static_cast<uint8_t>(mix(seq * 0x9E3779B97F4A7C15ULL + i));
}
// Index of the first wrong byte, or -1.
inline long check(const void* p, size_t bytes, uint64_t seq) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t v = mix(seq * 0x9E3779B97F4A7C15ULL + i);
    if (std::memcmp(b + i, &v, 8) != 0) return static_cast<long>(i);
  }
  for (; i < bytes; ++i)
    if (b[i] != static_cast<uint8_t>(mix(seq * 0x9E3779B97F4A7C15ULL + i))) return static_cast<long>(i);
  return -1;
}

inline Status send_msg(SendChannel* ch, size_t bytes, uint32_t tag, uint64_t seq, const WaitContext& ctx,
                       bool with_payload = true) {
  void* slot = nullptr;
  ACCORD_TRY(ch->acquire(bytes, &slot, ctx));
  if (with_payload) fill(slot, bytes, seq);
  ch->post(bytes, tag);
  return Status::success();
}

// Receives one message and checks size, tag and payload.
inline Status recv_msg(RecvChannel* ch, size_t want_bytes, uint32_t want_tag, uint64_t seq, const WaitContext& ctx,
                       bool with_payload = true) {
  const void* data = nullptr;
  size_t bytes = 0;
  uint32_t tag = 0;
  ACCORD_TRY(ch->wait(&data, &bytes, &tag, ctx));
  long bad = -1;
  if (bytes == want_bytes && with_payload) bad = check(data, bytes, seq);
  ch->release();
  if (bytes != want_bytes || tag != want_tag || bad >= 0)
    return error(ACCORD_ERR_INTERNAL, "message %llu: got %zu bytes tag %u, want %zu bytes tag %u; first bad byte %ld",
                 static_cast<unsigned long long>(seq), bytes, tag, want_bytes, want_tag, bad);
  return Status::success();
}

}  // namespace accord::tcptest
