// TCP transport between ranks on different hosts.
//
// Per remote peer, nsocks TCP connections (ACCORD_SOCKET_NSOCKS) carry one channel each way;
// messages are cut into pieces spread over them (Note [TCP framing], tcp_peer.hpp). Setup goes
// through the bootstrap store: every rank listens on an ephemeral port of the chosen interface
// (interface.hpp) and publishes "tcp/<rank>" = "ip:port"; of each pair the lower rank connects
// and the higher one accepts, and every socket proves the job secret both ways before it is
// used (handshake.hpp). Once all peers are connected the listener closes, so nothing can
// connect later. One progress thread per transport does all socket I/O with non-blocking
// calls: it writes posted send slots out and fills receive slots; channels only wait on their
// rings (spin briefly, then futex, checking the WaitContext between sleeps), so a dead peer
// (closed or reset socket) is reported as ACCORD_ERR_REMOTE within about 0.4 s, a silent one
// as ACCORD_ERR_TIMEOUT at the deadline, and the abort flag wakes any wait.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "core/settings.hpp"
#include "core/status.hpp"
#include "transport/bootstrap/store.hpp"
#include "transport/channel.hpp"
#include "transport/tcp/tcp_peer.hpp"

namespace accord {

constexpr int kDefaultTcpSockets = 2;
constexpr int kMaxTcpSockets = 16;

struct TcpOptions {
  Secret secret{};          // StoreEndpoint::secret: every socket proves it
  SockAddr bootstrap_addr;  // StoreEndpoint::addr: picks the interface when ifname is empty
  std::string ifname;       // ACCORD_SOCKET_IFNAME: name, prefix, "a,b", "=exact", "^exclude"
  int nsocks = 0;           // ACCORD_SOCKET_NSOCKS per peer pair (0: kDefaultTcpSockets)
  size_t slot_bytes = 128 << 10;  // max_bytes() of every channel: the executor's chunk size
  size_t nslots = 8;              // ring depth each way per peer
  WaitPolicy policy{20000, 0};    // short spin: TCP latency is tens of microseconds anyway
  int64_t linger_ms = 2000;       // at destroy: how long queued messages may take to leave
  // Bootstrap store keys of the listening addresses: "<prefix><rank>". A communicator's second
  // transport (device data, Note [Device data over TCP]) has a prefix of its own.
  std::string store_prefix = "tcp/";
  // Tests: called with the listening address once it is published, before accepting.
  std::function<void(const SockAddr&)> after_listen;
};

// Options from the settings table and the job's bootstrap endpoint.
TcpOptions make_tcp_options(const Settings& settings, const StoreEndpoint& endpoint, size_t slot_bytes,
                            size_t nslots);

class TcpTransport {
 public:
  // Collective over the ranks in `remote_ranks` (which must not include `rank`): rank a lists b
  // exactly when b lists a. Ranks with nothing remote return at once without listening.
  static Status setup(StoreClient* store, int rank, int nranks, const std::vector<int>& remote_ranks,
                      const TcpOptions& options, Deadline deadline, std::unique_ptr<TcpTransport>* out);
  // Writes out what was posted (at most linger_ms), says goodbye on every socket, closes.
  ~TcpTransport();

  SendChannel* sender(int peer) const;      // nullptr unless peer is remote
  RecvChannel* receiver(int peer) const;
  TcpPeer* peer(int rank) const;  // nullptr unless remote; Note [TCP rings in the caller's memory]
  const std::string& interface_name() const { return ifname_; }
  const SockAddr& listen_address() const { return listen_addr_; }
  int nsocks() const { return nsocks_; }
  int dropped_connections() const { return dropped_; }  // strangers turned away during setup

 private:
  TcpTransport() = default;
  void progress_loop();

  int rank_ = -1;
  int nsocks_ = 0;
  int dropped_ = 0;
  TcpOptions options_;
  std::string ifname_;
  SockAddr listen_addr_;
  std::vector<std::unique_ptr<TcpPeer>> peers_;  // by rank; null for ranks not remote
  ProgressBell bell_;
  std::atomic<bool> stop_{false};
  std::thread progress_;
};

}  // namespace accord
