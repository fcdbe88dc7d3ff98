// TCP key-value store for bootstrap (see store.hpp).
//
// Wire format (all integers little-endian):
//   server -> client on accept:  "ACDS" nonce[16]
//   client -> server:            "ACDC" rank:i32 nranks:i32 cnonce[16] mac[32]
//                                mac = HMAC(secret, "client" nonce rank nranks cnonce)
//   server -> client:            status:u8 len:u32 payload
//                                status 0: payload = HMAC(secret, "server" cnonce) (32 bytes)
//                                else: an accord_status_t and its error text (then it closes)
//   requests:   'S' klen:u32 key vlen:u32 value      (no reply)
//               'G' klen:u32 key                     -> status:u8 len:u32 (value | error text)
//               'B' klen:u32 (=0)                    goodbye: init finished here (no reply)
//               'F' klen:u32 code:u8+text            init failed here, for this reason (no reply)
// A rank whose connection closes without a goodbye died or failed during init: the server
// fails every pending and later get with an error naming it, so the others learn at once.
#include "transport/bootstrap/store.hpp"

#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/crypto.hpp"
#include "core/log.hpp"

namespace accord {
namespace {

constexpr size_t kMaxKey = 4096;
constexpr size_t kMaxValue = 16u << 20;
constexpr int64_t kHandshakeMs = 1000;  // strangers and idlers are dropped after this
constexpr char kIdMagic[4] = {'A', 'C', 'D', '1'};

// Note [A rank that fails alone at init] (store.hpp): the servers this process runs, by job
// secret, with what wait_for_store_server needs to know of them.
struct ServerState {
  pid_t owner = getpid();  // a forked child has the registry but not the server's thread
  int nranks = 0;  // 0 until the first rank joined
  int joined = 0;
  bool done = false;
  bool ranks_unknown = false;  // a rank was refused (nranks or rank number wrong): who else comes?
};
// Never destroyed: detached server threads may use them while the process exits.
std::mutex& g_servers_mu = *new std::mutex();
std::condition_variable& g_servers_cv = *new std::condition_variable();
std::map<Secret, std::shared_ptr<ServerState>>& servers() {
  static auto* m = new std::map<Secret, std::shared_ptr<ServerState>>();
  return *m;
}

// A fork (the test harness forks ranks while earlier jobs' servers run) must not leave the
// child a registry mutex that a server thread held at that instant; the servers the child
// inherits the entries of are told apart by their owner's pid (nothing is freed in the child,
// whose allocator may be locked by a thread it does not have).
void fork_safe_registry() {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork([] { g_servers_mu.lock(); }, [] { g_servers_mu.unlock(); }, [] { g_servers_mu.unlock(); });
  });
}

void put_u32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
uint32_t get_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::string client_mac_input(const uint8_t nonce[16], int32_t rank, int32_t nranks, const uint8_t cnonce[16]) {
  std::string m = "client";
  m.append(reinterpret_cast<const char*>(nonce), 16);
  m.append(reinterpret_cast<const char*>(&rank), 4);
  m.append(reinterpret_cast<const char*>(&nranks), 4);
  m.append(reinterpret_cast<const char*>(cnonce), 16);
  return m;
}

std::string server_mac_input(const uint8_t cnonce[16]) {
  std::string m = "server";
  m.append(reinterpret_cast<const char*>(cnonce), 16);
  return m;
}

struct Conn {
  Fd fd;
  std::string in;
  bool authed = false;
  bool finished = false;  // said goodbye
  int rank = -1;
  int64_t opened_ns = 0;
  uint8_t nonce[16];
  std::string peer;
};

class Server {
 public:
  Server(Fd listener, Secret secret, int64_t linger_ms, std::string where)
      : listener_(std::move(listener)), secret_(secret), linger_ms_(linger_ms), where_(std::move(where)) {
    fork_safe_registry();
    std::lock_guard<std::mutex> lock(g_servers_mu);
    servers()[secret_] = state_;
  }

  void run() {
    last_activity_ns_ = now_ns();
    for (;;) {
      if (done()) break;
      std::vector<pollfd>& pfds = pfds_;
      pfds.clear();
      pfds.push_back({listener_.get(), POLLIN, 0});
      for (auto& c : conns_) pfds.push_back({c->fd.get(), POLLIN, 0});
      poll(pfds.data(), pfds.size(), 100);
      int64_t t = now_ns();
      if (pfds[0].revents & POLLIN) accept_one(t);
      for (size_t i = 1; i < pfds.size(); ++i) {
        Conn* c = conns_[i - 1].get();
        if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
          if (!read_from(c)) close_conn(c);
        }
      }
      // Drop connections that did not authenticate in time.
      for (auto& c : conns_) {
        if (!c->authed && c->fd.valid() && t - c->opened_ns > kHandshakeMs * 1000000LL) {
          LOG_WARN(kBootstrap, "bootstrap server %s: dropped a connection from %s that did not authenticate "
                   "within %lld ms", where_.c_str(), c->peer.c_str(), static_cast<long long>(kHandshakeMs));
          close_conn(c.get());
        }
      }
      sweep();
    }
    LOG_DEBUG(kBootstrap, "bootstrap server %s: exiting (%d ranks joined)", where_.c_str(), joined_);
    std::lock_guard<std::mutex> lock(g_servers_mu);
    state_->done = true;
    auto it = servers().find(secret_);
    if (it != servers().end() && it->second == state_) servers().erase(it);
    g_servers_cv.notify_all();
  }

 private:
  bool done() {
    int authed_open = 0;
    for (auto& c : conns_) authed_open += c->authed ? 1 : 0;
    if (authed_open > 0) return false;
    if (nranks_ > 0 && joined_ >= nranks_) return true;  // everyone came and left
    // A failed job keeps answering late ranks with the error as long as a job that is starting
    // waits for them (Note [A rank that fails alone at init]).
    return now_ns() - last_activity_ns_ > linger_ms_ * 1000000LL;
  }

  void accept_one(int64_t t) {
    Fd fd;
    if (!tcp_accept(listener_.get(), Deadline::after_ms(0), &fd).ok()) return;
    auto c = std::make_unique<Conn>();
    c->fd = std::move(fd);
    c->opened_ns = t;
    sockaddr_storage ss;
    socklen_t len = sizeof ss;
    SockAddr a;
    if (getpeername(c->fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      std::memcpy(&a.storage, &ss, len);
      a.len = len;
      c->peer = a.to_string();
    }
    if (!random_bytes(c->nonce, 16).ok()) return;
    std::string hello(kIdMagic, 3);
    hello += 'S';
    hello.append(reinterpret_cast<const char*>(c->nonce), 16);
    if (!send_all(c->fd.get(), hello.data(), hello.size(), Deadline::after_ms(kHandshakeMs), "a client").ok()) return;
    conns_.push_back(std::move(c));
  }

  // Returns false when the connection must be closed. Requests that arrived together with
  // the close (a goodbye, typically) are processed first.
  bool read_from(Conn* c) {
    char buf[65536];
    bool open = true;
    for (;;) {
      ssize_t n = ::recv(c->fd.get(), buf, sizeof buf, 0);
      if (n > 0) {
        c->in.append(buf, static_cast<size_t>(n));
        if (!c->authed && c->in.size() > 4 + 8 + 16 + 32) return false;  // garbage
        if (c->in.size() > kMaxKey + kMaxValue + 16) return false;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      open = false;  // closed or reset
      break;
    }
    return process(c) && open;
  }

  bool process(Conn* c) {
    if (!c->authed) {
      constexpr size_t kHello = 4 + 4 + 4 + 16 + 32;
      if (c->in.size() < kHello) return true;
      const char* p = c->in.data();
      if (std::memcmp(p, "ACDC", 4) != 0) {
        LOG_WARN(kBootstrap, "bootstrap server %s: dropped a connection from %s that sent garbage",
                 where_.c_str(), c->peer.c_str());
        return false;
      }
      int32_t rank, nranks;
      std::memcpy(&rank, p + 4, 4);
      std::memcpy(&nranks, p + 8, 4);
      const uint8_t* cnonce = reinterpret_cast<const uint8_t*>(p + 12);
      std::string mi = client_mac_input(c->nonce, rank, nranks, cnonce);
      Digest want = hmac_sha256(secret_.data(), secret_.size(), mi.data(), mi.size());
      if (!constant_time_equal(want.data(), p + 28, 32)) {
        LOG_WARN(kBootstrap, "bootstrap server %s: dropped a connection from %s that did not prove the job "
                 "secret (a process of another job, or a stranger)", where_.c_str(), c->peer.c_str());
        return false;
      }
      std::string err;
      if (nranks <= 0 || rank < 0 || rank >= nranks) {
        err = format("rank %d of %d is out of range", rank, nranks);
      } else if (nranks_ > 0 && nranks != nranks_) {
        err = format("rank %d was started with nranks=%d, but rank %d said nranks=%d; every rank must pass "
                     "the same nranks", rank, nranks, first_rank_, nranks_);
      } else if (seen_.count(rank)) {
        err = format("rank %d joined twice (two processes claim rank %d); check the ranks given to "
                     "accord_comm_init_rank or the launcher", rank, rank);
      }
      std::string reply;
      if (!err.empty()) {
        if (fatal_.empty()) {
          fatal_ = err;
          fatal_code_ = ACCORD_ERR_INVALID_USAGE;
        }
        {
          std::lock_guard<std::mutex> lock(g_servers_mu);
          state_->ranks_unknown = true;
          g_servers_cv.notify_all();
        }
        reply += static_cast<char>(ACCORD_ERR_INVALID_USAGE);
        put_u32(&reply, static_cast<uint32_t>(err.size()));
        reply += err;
        (void)send_all(c->fd.get(), reply.data(), reply.size(), Deadline::after_ms(kHandshakeMs), "a client");
        fail_pending();
        return false;
      }
      if (nranks_ == 0) {
        nranks_ = nranks;
        first_rank_ = rank;
      }
      seen_.insert({rank, true});
      ++joined_;
      {
        std::lock_guard<std::mutex> lock(g_servers_mu);
        state_->nranks = nranks_;
        state_->joined = joined_;
      }
      c->authed = true;
      c->rank = rank;
      last_activity_ns_ = now_ns();
      std::string smi = server_mac_input(cnonce);
      Digest proof = hmac_sha256(secret_.data(), secret_.size(), smi.data(), smi.size());
      reply += '\0';
      put_u32(&reply, 32);
      reply.append(reinterpret_cast<const char*>(proof.data()), 32);
      if (!send_all(c->fd.get(), reply.data(), reply.size(), Deadline::after_ms(kHandshakeMs), "a client").ok())
        return false;
      c->in.erase(0, kHello);
    }
    // Requests.
    for (;;) {
      if (c->in.size() < 5) return true;
      char op = c->in[0];
      uint32_t klen = get_u32(c->in.data() + 1);
      if (klen > kMaxKey || (op != 'S' && op != 'G' && op != 'B' && op != 'F')) return false;
      if (c->in.size() < 5 + klen) return true;
      std::string key = c->in.substr(5, klen);
      size_t used = 5 + klen;
      if (op == 'B') {
        c->finished = true;
      } else if (op == 'F') {
        c->finished = true;
        if (fatal_.empty() && klen >= 1) {
          fatal_code_ = static_cast<uint8_t>(c->in[5]);
          std::string why = c->in.substr(6, klen - 1);
          const std::string own = "rank " + std::to_string(c->rank) + ": ";
          if (why.compare(0, own.size(), own) == 0) why.erase(0, own.size());  // said once is enough
          fatal_ = "rank " + std::to_string(c->rank) + " failed during init: " + why;
        }
        fail_pending();
      } else if (op == 'S') {
        if (c->in.size() < used + 4) return true;
        uint32_t vlen = get_u32(c->in.data() + used);
        if (vlen > kMaxValue) return false;
        if (c->in.size() < used + 4 + vlen) return true;
        data_[key] = c->in.substr(used + 4, vlen);
        used += 4 + vlen;
        answer_waiters(key);
      } else {
        waiting_[key].push_back(c);
        answer_waiters(key);
      }
      c->in.erase(0, used);
      last_activity_ns_ = now_ns();
    }
  }

  void reply_to(Conn* c, char status, const std::string& payload) {
    std::string r(1, status);
    put_u32(&r, static_cast<uint32_t>(payload.size()));
    r += payload;
    if (!send_all(c->fd.get(), r.data(), r.size(), Deadline::after_ms(5000), "a client").ok()) close_conn(c);
  }

  void answer_waiters(const std::string& key) {
    auto w = waiting_.find(key);
    if (w == waiting_.end()) return;
    if (!fatal_.empty()) return fail_pending();
    auto d = data_.find(key);
    if (d == data_.end()) return;
    std::vector<Conn*> list = std::move(w->second);
    waiting_.erase(w);
    for (Conn* c : list)
      if (c->fd.valid()) reply_to(c, '\0', d->second);
  }

  void fail_pending() {
    auto all = std::move(waiting_);
    waiting_.clear();
    for (auto& [key, list] : all)
      for (Conn* c : list)
        if (c->fd.valid()) reply_to(c, static_cast<char>(fatal_code_), fatal_);
  }

  void close_conn(Conn* c) {
    c->fd.reset();
    if (c->authed && !c->finished && fatal_.empty()) {
      fatal_ = format("rank %d left the bootstrap before its init finished (did it die? see its output)", c->rank);
      fatal_code_ = ACCORD_ERR_REMOTE;
      fail_pending();
    }
    if (c->authed) last_activity_ns_ = now_ns();
    c->authed = false;
  }

  void sweep() {
    for (auto& [key, list] : waiting_) {
      std::vector<Conn*> keep;
      for (Conn* c : list)
        if (c->fd.valid()) keep.push_back(c);
      list.swap(keep);
    }
    std::vector<std::unique_ptr<Conn>> keep;
    for (auto& c : conns_)
      if (c->fd.valid()) keep.push_back(std::move(c));
    conns_.swap(keep);
  }

  Fd listener_;
  Secret secret_;
  int64_t linger_ms_;
  std::string where_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<pollfd> pfds_;
  std::map<std::string, std::string> data_;
  std::map<std::string, std::vector<Conn*>> waiting_;
  std::map<int, bool> seen_;
  std::string fatal_;
  uint8_t fatal_code_ = ACCORD_ERR_REMOTE;
  int nranks_ = 0;
  int first_rank_ = -1;
  int joined_ = 0;
  int64_t last_activity_ns_ = 0;
  std::shared_ptr<ServerState> state_ = std::make_shared<ServerState>();
};

}  // namespace

Status start_store_server(StoreEndpoint* endpoint, int64_t linger_ms) {
  Fd listener;
  ACCORD_TRY(tcp_listen(&endpoint->addr, 1024, &listener));
  auto server = std::make_shared<Server>(std::move(listener), endpoint->secret, linger_ms,
                                         endpoint->addr.to_string());
  LOG_INFO(kBootstrap, "bootstrap server listening on %s", endpoint->addr.to_string().c_str());
  std::thread([server] { server->run(); }).detach();
  return Status::success();
}

Status StoreClient::connect(const StoreEndpoint& endpoint, int rank, int nranks, Deadline deadline,
                            std::unique_ptr<StoreClient>* out) {
  std::unique_ptr<StoreClient> c(new StoreClient());
  c->rank_ = rank;
  c->server_ = "the bootstrap server at " + endpoint.addr.to_string();
  const char* what = c->server_.c_str();
  ACCORD_TRY(tcp_connect(endpoint.addr, deadline, "the bootstrap server", &c->fd_).prefix(format("rank %d: ", rank)));
  char hello[20];
  ACCORD_TRY(recv_all(c->fd_.get(), hello, sizeof hello, deadline, what));
  if (std::memcmp(hello, "ACDS", 4) != 0)
    return error(ACCORD_ERR_SYSTEM, "rank %d: %s did not answer like an Accord bootstrap server; is the "
                 "address right and the port not used by another program?", rank, what);
  uint8_t cnonce[16];
  ACCORD_TRY(random_bytes(cnonce, sizeof cnonce));
  std::string mi = client_mac_input(reinterpret_cast<const uint8_t*>(hello + 4), rank, nranks, cnonce);
  Digest mac = hmac_sha256(endpoint.secret.data(), endpoint.secret.size(), mi.data(), mi.size());
  std::string msg = "ACDC";
  msg.append(reinterpret_cast<const char*>(&rank), 4);
  msg.append(reinterpret_cast<const char*>(&nranks), 4);
  msg.append(reinterpret_cast<const char*>(cnonce), 16);
  msg.append(reinterpret_cast<const char*>(mac.data()), 32);
  ACCORD_TRY(send_all(c->fd_.get(), msg.data(), msg.size(), deadline, what));
  char head[5];
  Status s = recv_all(c->fd_.get(), head, 5, deadline, what);
  if (s.code() == ACCORD_ERR_REMOTE)
    return error(ACCORD_ERR_INVALID_USAGE, "rank %d: %s refused the connection: the job secret did not match "
                 "(a unique id or ACCORD_SECRET of another job?)", rank, what);
  ACCORD_TRY(std::move(s));
  uint32_t len = get_u32(head + 1);
  if (len > kMaxValue) return error(ACCORD_ERR_SYSTEM, "rank %d: bad reply from %s", rank, what);
  std::string payload(len, '\0');
  ACCORD_TRY(recv_all(c->fd_.get(), payload.data(), len, deadline, what));
  if (head[0] != 0) return Status(static_cast<accord_status_t>(head[0]), format("rank %d: %s", rank, payload.c_str()));
  std::string smi = server_mac_input(cnonce);
  Digest proof = hmac_sha256(endpoint.secret.data(), endpoint.secret.size(), smi.data(), smi.size());
  if (len != 32 || !constant_time_equal(proof.data(), payload.data(), 32))
    return error(ACCORD_ERR_SYSTEM, "rank %d: %s could not prove it knows the job secret; refusing it",
                 rank, what);
  *out = std::move(c);
  return Status::success();
}

void wait_for_store_server(const StoreEndpoint& endpoint, int rank, Deadline deadline) {
  std::unique_lock<std::mutex> lock(g_servers_mu);
  auto it = servers().find(endpoint.secret);
  if (it == servers().end() || it->second->owner != getpid()) return;  // another process runs it
  const std::shared_ptr<ServerState> state = it->second;
  // A job whose ranks disagree on nranks or their numbers has no set of ranks to wait for.
  if (state->done || state->ranks_unknown || deadline.expired()) return;
  auto waiting = [&](Deadline until) {
    return !state->done && !state->ranks_unknown && !until.expired() && !deadline.expired();
  };
  auto wait_until = [&](Deadline until) {
    while (waiting(until))
      g_servers_cv.wait_for(lock, std::chrono::milliseconds(std::max(1, std::min({100, until.remaining_ms(),
                                                                                    deadline.remaining_ms()}))));
  };
  // Ranks launched together join within milliseconds: say nothing unless some are still
  // missing 2 s later (a rank started late, or stuck before its init).
  wait_until(Deadline::after_ms(2000));
  const int missing = state->nranks > 0 ? state->nranks - state->joined : 0;
  if (missing > 0 && waiting(deadline)) {
    lock.unlock();
    LOG_WARN(kBootstrap, "rank %d: this process runs the job's bootstrap server, so after its failed init it "
             "waits (at most %d ms more, ACCORD_INIT_TIMEOUT_MS) for the %d rank(s) that have not joined yet, "
             "to tell them why", rank, deadline.remaining_ms(), missing);
    lock.lock();
  }
  wait_until(deadline);
}

int store_servers_running() {
  std::lock_guard<std::mutex> lock(g_servers_mu);
  int n = 0;
  for (const auto& [secret, state] : servers()) n += state->owner == getpid() ? 1 : 0;
  return n;
}

StoreClient::~StoreClient() = default;

void StoreClient::report_failure(const Status& why) {
  std::string text(1, static_cast<char>(why.code()));
  text += why.message();
  std::string msg(1, 'F');
  put_u32(&msg, static_cast<uint32_t>(text.size()));
  msg += text;
  (void)send_all(fd_.get(), msg.data(), msg.size(), Deadline::after_ms(1000), server_.c_str());
}

Status StoreClient::finish() {
  std::string msg(1, 'B');
  put_u32(&msg, 0);
  return send_all(fd_.get(), msg.data(), msg.size(), Deadline::after_ms(5000), server_.c_str());
}

Status StoreClient::set(const std::string& key, const std::string& value) {
  std::string msg(1, 'S');
  put_u32(&msg, static_cast<uint32_t>(key.size()));
  msg += key;
  put_u32(&msg, static_cast<uint32_t>(value.size()));
  msg += value;
  return send_all(fd_.get(), msg.data(), msg.size(), Deadline::after_ms(60000), server_.c_str());
}

Status StoreClient::get(const std::string& key, std::string* value, Deadline deadline, const std::string& what) {
  std::string msg(1, 'G');
  put_u32(&msg, static_cast<uint32_t>(key.size()));
  msg += key;
  ACCORD_TRY(send_all(fd_.get(), msg.data(), msg.size(), deadline, server_.c_str()));
  char head[5];
  Status s = recv_all(fd_.get(), head, 5, deadline, server_.c_str());
  if (s.code() == ACCORD_ERR_TIMEOUT)
    return error(ACCORD_ERR_TIMEOUT, "rank %d: timed out after %lld ms waiting for %s to join (bootstrap key "
                 "'%s'); is that process running with the same unique id / launcher settings? "
                 "(ACCORD_INIT_TIMEOUT_MS sets this deadline)",
                 rank_, static_cast<long long>(deadline.budget_ms()), what.c_str(), key.c_str());
  ACCORD_TRY(std::move(s));
  uint32_t len = get_u32(head + 1);
  if (len > kMaxValue) return error(ACCORD_ERR_SYSTEM, "rank %d: bad reply from %s", rank_, server_.c_str());
  std::string payload(len, '\0');
  ACCORD_TRY(recv_all(fd_.get(), payload.data(), len, deadline, server_.c_str()));
  if (head[0] != 0) return Status(static_cast<accord_status_t>(head[0]), format("rank %d: %s", rank_, payload.c_str()));
  *value = std::move(payload);
  return Status::success();
}

Status StoreClient::all_gather(const std::string& prefix, int rank, int nranks, const std::string& mine,
                               std::vector<std::string>* all, Deadline deadline) {
  ACCORD_TRY(set(prefix + "/" + std::to_string(rank), mine));
  all->assign(static_cast<size_t>(nranks), std::string());
  for (int r = 0; r < nranks; ++r) {
    if (r == rank) {
      (*all)[static_cast<size_t>(r)] = mine;
      continue;
    }
    ACCORD_TRY(get(prefix + "/" + std::to_string(r), &(*all)[static_cast<size_t>(r)], deadline,
                   "rank " + std::to_string(r)));
  }
  return Status::success();
}

void encode_unique_id(const StoreEndpoint& endpoint, char out[ACCORD_UNIQUE_ID_BYTES]) {
  std::memset(out, 0, ACCORD_UNIQUE_ID_BYTES);
  std::memcpy(out, kIdMagic, 4);
  uint16_t family = static_cast<uint16_t>(endpoint.addr.family());
  std::memcpy(out + 4, &family, 2);
  uint16_t len = static_cast<uint16_t>(endpoint.addr.len);
  std::memcpy(out + 6, &len, 2);
  std::memcpy(out + 8, &endpoint.addr.storage, std::min<size_t>(endpoint.addr.len, 28));
  std::memcpy(out + 40, endpoint.secret.data(), 32);
}

Status decode_unique_id(const char in[ACCORD_UNIQUE_ID_BYTES], StoreEndpoint* out) {
  if (std::memcmp(in, kIdMagic, 4) != 0)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "the unique id is not one made by accord_get_unique_id (bad magic); "
                 "pass every rank the bytes rank 0 got, unchanged");
  uint16_t family, len;
  std::memcpy(&family, in + 4, 2);
  std::memcpy(&len, in + 6, 2);
  if ((family != AF_INET && family != AF_INET6) || len == 0 || len > 28)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "the unique id is corrupt (address family %u, length %u)", family, len);
  *out = StoreEndpoint{};
  std::memcpy(&out->addr.storage, in + 8, len);
  out->addr.len = len;
  std::memcpy(out->secret.data(), in + 40, 32);
  return Status::success();
}

}  // namespace accord
