// C API entry points. Each one validates its handle, turns internal Status values into
// accord_status_t plus a message for accord_last_error, and catches everything: no exception
// crosses the C ABI.
#include "include/accord/accord.h"
#include "include/accord/accord_device.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <utility>
#include <vector>
#include <thread>
#include <mutex>
#include <new>

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "api/handles.hpp"
#include "api/launch.hpp"
#include "core/log.hpp"
#include "core/settings.hpp"
#include "transport/device/device_runtime.hpp"

namespace accord {
namespace {

// Reads an enum argument as the int the caller passed, without loading an enum value that
// may be out of range (undefined behaviour in C++).
template <typename E>
int as_int(const E& e) {
  int v;
  static_assert(sizeof(E) == sizeof(int));
  std::memcpy(&v, &e, sizeof v);
  return v;
}

std::mutex g_handles_mutex;
// Never destroyed: it keeps retired handles reachable until the very end of the process,
// after static destructors, when leak checkers look.
std::deque<accord_comm*>& g_retired = *new std::deque<accord_comm*>();
thread_local std::string t_last_error;

template <typename F>
accord_status_t guarded(accord_comm* h, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return report(h, error(ACCORD_ERR_SYSTEM, "out of memory"));
  } catch (const std::exception& e) {
    return report(h, error(ACCORD_ERR_INTERNAL, "unexpected exception: %s", e.what()));
  } catch (...) {
    return report(h, error(ACCORD_ERR_INTERNAL, "unexpected exception"));
  }
}

// Calls queued between accord_group_start and the outermost accord_group_end, per thread.
// The depth is read by every call: as a plain int it needs no TLS wrapper and initialization
// check, which the vector's thread_local (it has a destructor) does.
thread_local int t_group_depth = 0;
thread_local std::vector<std::pair<accord_comm*, CollArgs>> t_group_ops;
// Sends and receives on device buffers in the open group, with their streams: each
// communicator's run as one kernel at the group's end (Note [Point-to-point schedules]).
struct DeviceP2p {
  accord_comm* comm;
  CollArgs args;
  accord_stream_t stream;
};
thread_local std::vector<DeviceP2p> t_group_device_p2p;

accord_status_t run_collective(accord_comm_t comm, const CollArgs& args, accord_stream_t stream, const char* fn) {
  CallGuard guard(comm);
  return guarded(comm, [&]() -> accord_status_t {
    accord_status_t code;
    if (!live(comm, fn, &code)) return code;
    // Device buffers: enqueued on the caller's stream at once, in a group too (the device
    // worker of each communicator runs them, so one thread can drive several GPUs).
    bool on_device = false;
    Status where = comm->impl->classify(args, &on_device);
    if (!where.ok()) return report(comm, where);
    if (on_device && is_point_to_point(args.coll)) {
      if (t_group_depth == 0) return report(comm, comm->impl->enqueue_device_p2p({args}, stream));
      Status s = comm->impl->validate(args);
      if (s.ok()) t_group_device_p2p.push_back(DeviceP2p{comm, args, stream});
      return report(comm, s);
    }
    if (on_device) return report(comm, comm->impl->enqueue_device(args, stream));
    if (stream != nullptr && comm->impl->device() < 0)
      return report(comm, error(ACCORD_ERR_UNSUPPORTED, "rank %d: %s: a stream was given, but this communicator has "
                                "no GPU (accord_comm_init_all with a devlist, ACCORD_DEVICE or ACCORD_SIM_TOPO give "
                                "it one); pass stream = NULL with host memory", comm->impl->rank(), fn));
    if (t_group_depth > 0) {
      Status s = comm->impl->validate(args);
      if (s.ok()) t_group_ops.emplace_back(comm, args);
      return report(comm, s);
    }
    // A communicator with a GPU may have device calls queued on its worker: a host call runs
    // behind them, on the same worker, so that the two never use the channels at once.
    if (comm->impl->device() >= 0) return report(comm, comm->impl->run_async({args}).get());
    return report(comm, comm->impl->run(args));
  });
}

// A group's sends and receives on device buffers: one kernel per communicator, on the stream
// its calls named (one stream per communicator and group).
accord_status_t run_group_device_p2p(std::vector<DeviceP2p> ops) {
  std::vector<accord_comm*> comms;
  std::map<accord_comm*, std::vector<CollArgs>> batches;
  std::map<accord_comm*, accord_stream_t> streams;
  accord_status_t first = ACCORD_SUCCESS;
  for (const DeviceP2p& op : ops) {
    if (!batches.count(op.comm)) {
      comms.push_back(op.comm);
      streams[op.comm] = op.stream;
    } else if (streams[op.comm] != op.stream && first == ACCORD_SUCCESS) {
      first = report(op.comm, error(ACCORD_ERR_INVALID_USAGE,
                                    "accord_group_end: rank %d: the sends and receives of one group on one "
                                    "communicator use two streams (%p and %p); pass one stream to all of them",
                                    op.comm->impl->rank(), static_cast<void*>(streams[op.comm]),
                                    static_cast<void*>(op.stream)));
    }
    batches[op.comm].push_back(op.args);
  }
  if (first != ACCORD_SUCCESS) return first;
  for (accord_comm* h : comms) {
    CallGuard guard(h);
    accord_status_t code = guarded(h, [&]() -> accord_status_t {
      accord_status_t live_code;
      if (!live(h, "accord_group_end", &live_code)) return live_code;
      return report(h, h->impl->enqueue_device_p2p(batches[h], streams[h]));
    });
    if (first == ACCORD_SUCCESS) first = code;
  }
  return first;
}

accord_status_t run_group(std::vector<std::pair<accord_comm*, CollArgs>> ops) {
  // One batch per communicator, in call order; each runs on its communicator's worker.
  std::vector<accord_comm*> comms;
  std::map<accord_comm*, std::vector<CollArgs>> batches;
  for (auto& [h, a] : ops) {
    if (!batches.count(h)) comms.push_back(h);
    batches[h].push_back(a);
  }
  std::vector<std::unique_ptr<CallGuard>> guards;
  std::vector<std::future<Status>> results;
  for (accord_comm* h : comms) {
    guards.push_back(std::make_unique<CallGuard>(h));
    accord_status_t code;
    if (!live(h, "accord_group_end", &code)) {
      std::promise<Status> p;
      p.set_value(error(code, "%s", accord_last_error(nullptr)));
      results.push_back(p.get_future());
      continue;
    }
    results.push_back(h->impl->run_async(std::move(batches[h])));
  }
  accord_status_t first = ACCORD_SUCCESS;
  for (size_t i = 0; i < comms.size(); ++i) {
    Status s = results[i].get();
    accord_status_t code = report(comms[i], s);
    if (first == ACCORD_SUCCESS) first = code;
  }
  return first;
}

}  // namespace

// Note [Calls in flight] (handles.hpp).
std::atomic<bool> g_abort_fences_calls{false};

namespace {

std::mutex g_slots_mutex;
std::vector<CallSlot*>& g_slots = *new std::vector<CallSlot*>();  // never freed, like g_retired

// Gives the thread's slot back when the thread exits.
struct SlotOwner {
  CallSlot* slot = nullptr;
  ~SlotOwner() {
    if (slot == nullptr) return;
    slot->comm.store(nullptr, std::memory_order_release);
    slot->taken.store(false, std::memory_order_release);
  }
};
thread_local CallSlot* t_call_slot = nullptr;
thread_local SlotOwner t_slot_owner;

// A forked child has only the thread that forked, and its own memory map, which is not
// registered for membarrier (the kernel keeps that per map): the other threads' slots are
// free again, and the child registers anew or fences every call.
void register_for_membarrier();
void slots_before_fork() { g_slots_mutex.lock(); }
void slots_after_fork_in_parent() { g_slots_mutex.unlock(); }
void slots_after_fork_in_child() {
  for (CallSlot* s : g_slots)
    if (s != t_call_slot) {
      s->comm.store(nullptr, std::memory_order_relaxed);
      s->taken.store(false, std::memory_order_relaxed);
    }
  g_slots_mutex.unlock();
  g_abort_fences_calls.store(false, std::memory_order_relaxed);
  register_for_membarrier();
}

void register_for_membarrier() {
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { pthread_atfork(slots_before_fork, slots_after_fork_in_parent, slots_after_fork_in_child); });
#if defined(__SANITIZE_THREAD__)
  return;  // ThreadSanitizer does not know membarrier: keep the fence on every call
#else
  const long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (cmds < 0 || (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0 ||
      (cmds & MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0)
    return;
  if (syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0) return;
  g_abort_fences_calls.store(true, std::memory_order_relaxed);
#endif
}

// When the library is loaded, before any handle exists, and while the process usually has
// one thread, for which the kernel registers at once (with more it waits for an RCU grace
// period, milliseconds). Registering at the end of the first init instead put that wait
// between the FIFOs' warming (Note [FIFO lines at init]) and the first call that used them:
// a 2-rank 512 B all-reduce out of place, the first size past the board in a `-n 20 -w 5`
// sweep, went from 0.61 to 0.69 us a call.
[[maybe_unused]] const bool g_registered_at_load = (register_for_membarrier(), true);

}  // namespace

CallSlot* this_thread_call_slot() {
  if (t_call_slot != nullptr) return t_call_slot;
  std::lock_guard<std::mutex> lock(g_slots_mutex);
  for (CallSlot* s : g_slots)
    if (!s->taken.load(std::memory_order_acquire)) {
      t_call_slot = s;
      break;
    }
  if (t_call_slot == nullptr) {
    t_call_slot = new CallSlot();
    g_slots.push_back(t_call_slot);
  }
  t_call_slot->taken.store(true, std::memory_order_relaxed);
  t_slot_owner.slot = t_call_slot;
  return t_call_slot;
}

void fence_calls_in_flight() {
  // Registered before the first handle existed, so before any call could skip its fence.
  if (g_abort_fences_calls.load(std::memory_order_relaxed) &&
      syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
    LOG_WARN(kCore, "accord_comm_abort: membarrier failed (%s) after it had been registered; a call entering "
             "just now may not be seen", std::strerror(errno));
}

bool calls_in_flight(const accord_comm* h) {
  if (h->active_calls.load(std::memory_order_seq_cst) > 0) return true;
  std::lock_guard<std::mutex> lock(g_slots_mutex);
  for (const CallSlot* s : g_slots)
    if (s->comm.load(std::memory_order_acquire) == h) return true;
  return false;
}

accord_comm* new_handle(std::unique_ptr<Communicator> impl) {
  accord_comm* h = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_handles_mutex);
    if (g_retired.size() > 4096) {
      h = g_retired.front();
      g_retired.pop_front();
    }
  }
  if (h == nullptr) h = new accord_comm();
  h->impl = std::move(impl);
  h->last_error.clear();
  h->magic.store(kLiveMagic);
  return h;
}

void retire_handle(accord_comm* h) {
  h->magic = 0;
  h->active_calls = 0;
  h->impl.reset();
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  g_retired.push_back(h);
}

accord_status_t report(accord_comm* h, const Status& s) {
  if (s.ok()) return ACCORD_SUCCESS;
  t_last_error = s.message();
  if (h != nullptr && h->magic == kLiveMagic) h->last_error = s.message();
  return s.code();
}

bool live(accord_comm* h, const char* function, accord_status_t* code) {
  if (h == nullptr) {
    *code = report(nullptr, error(ACCORD_ERR_INVALID_ARGUMENT, "%s: comm is NULL; create one with "
                                  "accord_comm_init_rank or accord_comm_init_from_env", function));
    return false;
  }
  if (h->magic != kLiveMagic) {
    *code = report(nullptr, error(ACCORD_ERR_INVALID_USAGE, "%s: this communicator was destroyed (or is not an "
                                  "accord_comm_t); create a new one", function));
    return false;
  }
  return true;
}

}  // namespace accord

using namespace accord;

extern "C" {

const char* accord_last_error(accord_comm_t comm) {
  if (comm != nullptr && comm->magic == kLiveMagic) return comm->last_error.c_str();
  return t_last_error.c_str();
}

accord_status_t accord_get_unique_id(accord_unique_id_t* id) {
  return guarded(nullptr, [&]() -> accord_status_t {
    if (id == nullptr) return report(nullptr, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_get_unique_id: id is NULL"));
    return report(nullptr, make_unique_id(id));
  });
}

namespace {
accord_status_t init_rank_on(accord_comm_t* comm, int nranks, accord_unique_id_t id, int rank, int device) {
  return guarded(nullptr, [&]() -> accord_status_t {
    if (comm == nullptr)
      return report(nullptr, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_comm_init_rank: comm is NULL"));
    *comm = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks)
      return report(nullptr, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_comm_init_rank: rank %d is out of range for "
                                   "nranks %d; ranks are 0..nranks-1", rank, nranks));
    InitSpec spec;
    spec.rank = rank;
    spec.nranks = nranks;
    spec.device = device;
    spec.settings_error = load_settings(&spec.settings);  // init tells the others (Note [A rank that fails alone at init])
    Status s = decode_unique_id(id.internal, &spec.endpoint);
    std::unique_ptr<Communicator> c;
    if (s.ok()) s = Communicator::create(spec, &c);
    if (!s.ok()) return report(nullptr, s);
    *comm = new_handle(std::move(c));
    return ACCORD_SUCCESS;
  });
}
}  // namespace

accord_status_t accord_comm_init_rank(accord_comm_t* comm, int nranks, accord_unique_id_t id, int rank) {
  return init_rank_on(comm, nranks, id, rank, -1);
}

accord_status_t accord_comm_init_rank_device(accord_comm_t* comm, int nranks, accord_unique_id_t id,
                                             int rank, int device) {
  return init_rank_on(comm, nranks, id, rank, device < 0 ? -1 : device);
}

accord_status_t accord_comm_init_from_env(accord_comm_t* comm) {
  return guarded(nullptr, [&]() -> accord_status_t {
    if (comm == nullptr)
      return report(nullptr, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_comm_init_from_env: comm is NULL"));
    *comm = nullptr;
    InitSpec spec;
    LaunchCleanup cleanup;
    spec.settings_error = load_settings(&spec.settings);  // init tells the others (Note [A rank that fails alone at init])
    Status s = spec_from_environment(&spec, &cleanup);
    if (!s.ok() && !spec.settings_error.ok()) s = spec.settings_error;  // likely the cause
    std::unique_ptr<Communicator> c;
    if (s.ok()) s = Communicator::create(spec, &c);
    cleanup.run();
    if (!s.ok()) return report(nullptr, s);
    *comm = new_handle(std::move(c));
    return ACCORD_SUCCESS;
  });
}

accord_status_t accord_comm_init_all(accord_comm_t* comms, int ndev, const int* devlist) {
  return guarded(nullptr, [&]() -> accord_status_t {
    if (comms == nullptr || ndev < 1)
      return report(nullptr, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_comm_init_all: comms is NULL or ndev %d < 1",
                                   ndev));
    if (devlist != nullptr)
      for (int i = 0; i < ndev; ++i)
        if (devlist[i] < 0)
          return report(nullptr, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_comm_init_all: devlist[%d] = %d is not a "
                                       "GPU; use device indices 0..accord_device_count()-1", i, devlist[i]));
    for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
    if (devlist != nullptr) {
      // A GPU that does not exist is said here, naming it, rather than by whichever of the
      // ranks' threads fails first (the others fail too, blaming the rank that left).
      Settings settings;
      Status s = load_settings(&settings);
      if (!s.ok()) return report(nullptr, s);
      std::string why;
      const DeviceRuntime* rt = process_device_runtime(settings, &why);
      for (int i = 0; i < ndev; ++i) {
        if (rt == nullptr)
          return report(nullptr, error(ACCORD_ERR_UNSUPPORTED,
                                       "accord_comm_init_all: devlist[%d] = GPU %d, but there is "
                                       "no GPU: %s; pass devlist NULL for host-only ranks",
                                       i, devlist[i], why.c_str()));
        const int count = rt->device_count();
        if (devlist[i] >= count)
          return report(nullptr, error(ACCORD_ERR_INVALID_ARGUMENT,
                                       "accord_comm_init_all: devlist[%d] = GPU %d does not exist: "
                                       "the %s runtime has %d GPU(s) (0..%d); use device indices "
                                       "0..accord_device_count()-1",
                                       i, devlist[i], rt->kind(), count, count - 1));
      }
    }
    accord_unique_id_t id;
    accord_status_t st = accord_get_unique_id(&id);
    if (st != ACCORD_SUCCESS) return st;
    std::vector<accord_status_t> codes(static_cast<size_t>(ndev));
    std::vector<std::string> messages(static_cast<size_t>(ndev));
    std::vector<std::thread> threads;
    for (int r = 0; r < ndev; ++r)
      threads.emplace_back([&, r] {
        codes[static_cast<size_t>(r)] = init_rank_on(&comms[r], ndev, id, r, devlist ? devlist[r] : -1);
        messages[static_cast<size_t>(r)] = accord_last_error(nullptr);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < ndev; ++r) {
      if (codes[static_cast<size_t>(r)] == ACCORD_SUCCESS) continue;
      for (int k = 0; k < ndev; ++k)
        if (comms[k] != nullptr) accord_comm_destroy(comms[k]), comms[k] = nullptr;
      return report(nullptr, Status(codes[static_cast<size_t>(r)], messages[static_cast<size_t>(r)]));
    }
    return ACCORD_SUCCESS;
  });
}

accord_status_t accord_group_start(void) {
  ++t_group_depth;
  return ACCORD_SUCCESS;
}

accord_status_t accord_group_end(void) {
  return guarded(nullptr, [&]() -> accord_status_t {
    if (t_group_depth == 0)
      return report(nullptr, error(ACCORD_ERR_INVALID_USAGE, "accord_group_end without accord_group_start"));
    if (--t_group_depth > 0) return ACCORD_SUCCESS;
    const accord_status_t device = run_group_device_p2p(std::exchange(t_group_device_p2p, {}));
    const accord_status_t host = run_group(std::exchange(t_group_ops, {}));
    return device != ACCORD_SUCCESS ? device : host;
  });
}

accord_status_t accord_comm_destroy(accord_comm_t comm) {
  return guarded(nullptr, [&]() -> accord_status_t {
    accord_status_t code;
    if (!live(comm, "accord_comm_destroy", &code)) return code;
    uint64_t expected = kLiveMagic;
    if (!comm->magic.compare_exchange_strong(expected, kAbortingMagic))
      return report(nullptr, error(ACCORD_ERR_INVALID_USAGE, "accord_comm_destroy: already destroyed or aborted"));
    retire_handle(comm);
    return ACCORD_SUCCESS;
  });
}

accord_status_t accord_comm_abort(accord_comm_t comm) {
  return guarded(nullptr, [&]() -> accord_status_t {
    accord_status_t code;
    if (!live(comm, "accord_comm_abort", &code)) return code;
    uint64_t expected = kLiveMagic;
    // Only one of several concurrent abort/destroy calls proceeds.
    if (!comm->magic.compare_exchange_strong(expected, kAbortingMagic))
      return report(nullptr, error(ACCORD_ERR_INVALID_USAGE, "accord_comm_abort: already destroyed or aborted"));
    comm->impl->abort();
    // Wait (bounded) for calls inside the communicator to leave: they see the abort flag
    // within one 20 ms sleep slice (Note [Calls in flight]).
    fence_calls_in_flight();
    Deadline deadline = Deadline::after_ms(5000);
    while (calls_in_flight(comm) && !deadline.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (calls_in_flight(comm)) {
      // A call is stuck outside our waits (e.g. in the user's own code path); keep the
      // communicator's memory rather than free it under that call.
      (void)comm->impl.release();
      LOG_WARN(kCore, "accord_comm_abort: a call did not leave within 5 s; its communicator is leaked, not freed");
    }
    retire_handle(comm);
    return ACCORD_SUCCESS;
  });
}

accord_status_t accord_comm_get_async_error(accord_comm_t comm, accord_status_t* async_error) {
  CallGuard guard(comm);
  accord_status_t code;
  if (!live(comm, "accord_comm_get_async_error", &code)) return code;
  if (async_error == nullptr)
    return report(comm, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_comm_get_async_error: async_error is NULL"));
  *async_error = comm->impl->sticky_error();
  // The failure's message, for accord_last_error(comm) on this thread (the worker that hit it
  // could not record it on the caller's thread).
  if (*async_error != ACCORD_SUCCESS) (void)report(comm, comm->impl->sticky_status());
  return ACCORD_SUCCESS;
}

accord_status_t accord_comm_plan(accord_comm_t comm, char* buf, size_t* len) {
  CallGuard guard(comm);
  return guarded(comm, [&]() -> accord_status_t {
    accord_status_t code;
    if (!live(comm, "accord_comm_plan", &code)) return code;
    if (len == nullptr) return report(comm, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_comm_plan: len is NULL"));
    const std::string text = comm->impl->plan();
    if (buf != nullptr && *len > 0) {
      const size_t n = std::min(*len - 1, text.size());
      std::memcpy(buf, text.data(), n);
      buf[n] = '\0';
    }
    *len = text.size() + 1;
    return ACCORD_SUCCESS;
  });
}

accord_status_t accord_comm_register(accord_comm_t comm, void* buf, size_t bytes, void** handle) {
  CallGuard guard(comm);
  return guarded(comm, [&]() -> accord_status_t {
    accord_status_t code;
    if (!live(comm, "accord_comm_register", &code)) return code;
    if (handle == nullptr)
      return report(comm, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_comm_register: handle is NULL"));
    *handle = nullptr;
    if (buf == nullptr && bytes > 0)
      return report(comm, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_comm_register: buf is NULL with %zu bytes", bytes));
    uint64_t h = 0;
    Status s = comm->impl->register_buffer(buf, bytes, &h).prefix("accord_comm_register: ");
    if (s.ok()) *handle = reinterpret_cast<void*>(static_cast<uintptr_t>(h));
    return report(comm, s);
  });
}

accord_status_t accord_comm_deregister(accord_comm_t comm, void* handle) {
  CallGuard guard(comm);
  return guarded(comm, [&]() -> accord_status_t {
    accord_status_t code;
    if (!live(comm, "accord_comm_deregister", &code)) return code;
    return report(comm, comm->impl->deregister_buffer(reinterpret_cast<uintptr_t>(handle))
                            .prefix("accord_comm_deregister: "));
  });
}

accord_status_t accord_comm_rank(accord_comm_t comm, int* rank) {
  CallGuard guard(comm);
  accord_status_t code;
  if (!live(comm, "accord_comm_rank", &code)) return code;
  if (rank == nullptr) return report(comm, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_comm_rank: rank is NULL"));
  *rank = comm->impl->rank();
  return ACCORD_SUCCESS;
}

accord_status_t accord_comm_device(accord_comm_t comm, int* device) {
  CallGuard guard(comm);
  accord_status_t code;
  if (!live(comm, "accord_comm_device", &code)) return code;
  if (device == nullptr) return report(comm, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_comm_device: device is NULL"));
  *device = comm->impl->device();
  return ACCORD_SUCCESS;
}

accord_status_t accord_comm_count(accord_comm_t comm, int* nranks) {
  CallGuard guard(comm);
  accord_status_t code;
  if (!live(comm, "accord_comm_count", &code)) return code;
  if (nranks == nullptr) return report(comm, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_comm_count: nranks is NULL"));
  *nranks = comm->impl->nranks();
  return ACCORD_SUCCESS;
}

accord_status_t accord_all_reduce(const void* sendbuf, void* recvbuf, size_t count, accord_datatype_t dtype,
                                  accord_red_op_t op, accord_comm_t comm, accord_stream_t stream) {
  CollArgs a{Collective::kAllReduce, sendbuf, recvbuf, count, as_int(dtype), as_int(op), 0};
  return run_collective(comm, a, stream, "all_reduce");
}

accord_status_t accord_reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount, accord_datatype_t dtype,
                                      accord_red_op_t op, accord_comm_t comm, accord_stream_t stream) {
  CollArgs a{Collective::kReduceScatter, sendbuf, recvbuf, recvcount, as_int(dtype), as_int(op), 0};
  return run_collective(comm, a, stream, "reduce_scatter");
}

accord_status_t accord_all_gather(const void* sendbuf, void* recvbuf, size_t sendcount, accord_datatype_t dtype,
                                  accord_comm_t comm, accord_stream_t stream) {
  CollArgs a{Collective::kAllGather, sendbuf, recvbuf, sendcount, as_int(dtype), ACCORD_SUM, 0};
  return run_collective(comm, a, stream, "all_gather");
}

accord_status_t accord_broadcast(const void* sendbuf, void* recvbuf, size_t count, accord_datatype_t dtype, int root,
                                 accord_comm_t comm, accord_stream_t stream) {
  CollArgs a{Collective::kBroadcast, sendbuf, recvbuf, count, as_int(dtype), ACCORD_SUM, root};
  return run_collective(comm, a, stream, "broadcast");
}

accord_status_t accord_reduce(const void* sendbuf, void* recvbuf, size_t count, accord_datatype_t dtype,
                              accord_red_op_t op, int root, accord_comm_t comm, accord_stream_t stream) {
  CollArgs a{Collective::kReduce, sendbuf, recvbuf, count, as_int(dtype), as_int(op), root};
  return run_collective(comm, a, stream, "reduce");
}

accord_status_t accord_send(const void* sendbuf, size_t count, accord_datatype_t dtype, int peer,
                            accord_comm_t comm, accord_stream_t stream) {
  CollArgs a{Collective::kSend, sendbuf, nullptr, count, as_int(dtype), ACCORD_SUM, peer};
  return run_collective(comm, a, stream, "send");
}

accord_status_t accord_recv(void* recvbuf, size_t count, accord_datatype_t dtype, int peer,
                            accord_comm_t comm, accord_stream_t stream) {
  CollArgs a{Collective::kRecv, nullptr, recvbuf, count, as_int(dtype), ACCORD_SUM, peer};
  return run_collective(comm, a, stream, "recv");
}

accord_status_t accord_red_op_create_pre_mul_sum(accord_red_op_t* op, void* scalar, accord_datatype_t dtype,
                                                 accord_scalar_residence_t residence, accord_comm_t comm) {
  CallGuard guard(comm);
  return guarded(comm, [&]() -> accord_status_t {
    accord_status_t code;
    if (!live(comm, "accord_red_op_create_pre_mul_sum", &code)) return code;
    const int where = as_int(residence);
    if (where != ACCORD_SCALAR_DEVICE && where != ACCORD_SCALAR_HOST_IMMEDIATE)
      return report(comm, error(ACCORD_ERR_INVALID_ARGUMENT,
                                "rank %d: accord_red_op_create_pre_mul_sum: residence %d; use "
                                "ACCORD_SCALAR_DEVICE or ACCORD_SCALAR_HOST_IMMEDIATE",
                                comm->impl->rank(), where));
    int made = 0;
    Status s = comm->impl->create_premul(as_int(dtype), scalar, where == ACCORD_SCALAR_HOST_IMMEDIATE, &made);
    if (s.ok() && op != nullptr) *op = static_cast<accord_red_op_t>(made);
    return report(comm, s);
  });
}

accord_status_t accord_red_op_destroy(accord_red_op_t op, accord_comm_t comm) {
  CallGuard guard(comm);
  return guarded(comm, [&]() -> accord_status_t {
    accord_status_t code;
    if (!live(comm, "accord_red_op_destroy", &code)) return code;
    return report(comm, comm->impl->destroy_premul(as_int(op)));
  });
}

accord_status_t accord_barrier(accord_comm_t comm, accord_stream_t stream) {
  CollArgs a{Collective::kBarrier, nullptr, nullptr, 0, ACCORD_UINT8, ACCORD_SUM, 0};
  return run_collective(comm, a, stream, "barrier");
}

}  // extern "C"
