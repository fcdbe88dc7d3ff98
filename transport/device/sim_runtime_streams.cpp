// SimulatedRuntime: streams, events and IPC handles (the handle bookkeeping; the work queues
// are sim_stream.cpp, the shared memory is sim_memory.cpp).
#include "transport/device/sim_runtime.hpp"

#include <chrono>
#include <thread>

#include "core/log.hpp"

namespace accord {

Status SimulatedRuntime::find_stream(Stream s, const char* op, std::shared_ptr<sim::SimStream>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(s.id);
  if (it == streams_.end())
    return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: stream %llu does not exist (destroyed, never created, or made "
                 "by another runtime)", op, (unsigned long long)s.id);
  *out = it->second;
  return Status();
}

Status SimulatedRuntime::find_event(Event e, const char* op, std::shared_ptr<sim::SimEvent>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(e.id);
  if (it == events_.end())
    return error(ACCORD_ERR_INVALID_ARGUMENT, "%s: event %llu does not exist (destroyed, never created, or made "
                 "by another runtime)", op, (unsigned long long)e.id);
  *out = it->second;
  return Status();
}

Status SimulatedRuntime::create_stream(int device, Stream* out, bool blocking) {
  ACCORD_TRY(not_in_host_func("create_stream"));
  ACCORD_TRY(to_physical(&device, "create_stream"));
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: create_stream: null output", device);
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  streams_[id] = std::make_shared<sim::SimStream>(id, device, blocking);
  out->id = id;
  return Status();
}

Status SimulatedRuntime::destroy_stream(Stream stream) {
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(not_in_host_func("destroy_stream"));
  ACCORD_TRY(find_stream(stream, "destroy_stream", &s));
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams_.erase(stream.id);
  }
  // Like cudaStreamDestroy, queued work still runs; its errors have nobody left to hear them.
  // Waits on words end at once (Note [Stream memory operations]): a GPU would leave them
  // pending without blocking the caller, the simulation joins the stream's thread.
  s->cancel_waits();
  Status st = s->synchronize();
  if (!st.ok()) LOG_DEBUG(kGpu, "stream %llu destroyed after an error: %s", (unsigned long long)stream.id,
                          st.message().c_str());
  return Status();
}

Status SimulatedRuntime::synchronize_stream(Stream stream) {
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(not_in_host_func("synchronize_stream"));
  ACCORD_TRY(find_stream(stream, "synchronize_stream", &s));
  Status st = s->synchronize();
  if (!st.ok()) return st.prefix(format("stream %llu (device %d): ", (unsigned long long)stream.id, s->device()));
  return Status();
}

Status SimulatedRuntime::synchronize_device(int device) {
  ACCORD_TRY(not_in_host_func("synchronize_device"));
  ACCORD_TRY(to_physical(&device, "synchronize_device"));
  std::vector<std::shared_ptr<sim::SimStream>> mine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, s] : streams_)
      if (s->device() == device) mine.push_back(s);
  }
  Status first;
  for (auto& s : mine) {
    Status st = s->synchronize();
    if (!st.ok() && first.ok())
      first = st.prefix(format("stream %llu (device %d): ", (unsigned long long)s->id(), device));
  }
  return first;
}

Status SimulatedRuntime::create_event(int device, Event* out) {
  ACCORD_TRY(not_in_host_func("create_event"));
  ACCORD_TRY(to_physical(&device, "create_event"));
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: create_event: null output", device);
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  events_[id] = std::make_shared<sim::SimEvent>(id, device);
  out->id = id;
  return Status();
}

Status SimulatedRuntime::destroy_event(Event event) {
  std::shared_ptr<sim::SimEvent> e;
  ACCORD_TRY(find_event(event, "destroy_event", &e));
  ACCORD_TRY(wait_idle(e->device(), false, "destroy_event",
                       "event destruction takes a driver lock that waits for the device (cudaEventDestroy "
                       "hung this way behind a held stream on an H100)"));
  // Queued records and waits hold their own reference; the event lives until they ran.
  std::lock_guard<std::mutex> lock(mu_);
  events_.erase(event.id);
  return Status();
}

Status SimulatedRuntime::record_event(Event event, Stream stream) {
  std::shared_ptr<sim::SimEvent> e;
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(not_in_host_func("record_event"));
  ACCORD_TRY(find_event(event, "record_event", &e));
  ACCORD_TRY(find_stream(stream, "record_event", &s));
  if (e->device() != s->device())
    return error(ACCORD_ERR_INVALID_ARGUMENT, "record_event: event %llu belongs to device %d but stream %llu to "
                 "device %d; record an event of the stream's device", (unsigned long long)event.id, e->device(),
                 (unsigned long long)stream.id, s->device());
  const uint64_t seq = e->begin_record();
  s->enqueue(
      [e, seq] {
        e->complete(seq);
        return Status();
      },
      /*always=*/true);
  return Status();
}

Status SimulatedRuntime::stream_wait_event(Stream stream, Event event) {
  std::shared_ptr<sim::SimEvent> e;
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(not_in_host_func("stream_wait_event"));
  ACCORD_TRY(find_stream(stream, "stream_wait_event", &s));
  ACCORD_TRY(find_event(event, "stream_wait_event", &e));
  const uint64_t seq = e->latest();
  if (seq == 0) return Status();  // never recorded: nothing to wait for, as in CUDA
  s->enqueue([e, seq] {
    e->wait_for(seq);
    return Status();
  });
  return Status();
}

Status SimulatedRuntime::synchronize_event(Event event) {
  std::shared_ptr<sim::SimEvent> e;
  ACCORD_TRY(not_in_host_func("synchronize_event"));
  ACCORD_TRY(find_event(event, "synchronize_event", &e));
  e->wait_for(e->latest());
  return Status();
}

Status SimulatedRuntime::query_event(Event event, bool* done) {
  std::shared_ptr<sim::SimEvent> e;
  ACCORD_TRY(find_event(event, "query_event", &e));
  if (!done) return error(ACCORD_ERR_INVALID_ARGUMENT, "query_event: null output");
  *done = e->done(e->latest());
  return Status();
}

Status SimulatedRuntime::launch_host_func(Stream stream, HostFn fn, void* arg) {
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(not_in_host_func("launch_host_func"));
  ACCORD_TRY(find_stream(stream, "launch_host_func", &s));
  if (!fn) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: launch_host_func: null function", s->device());
  s->enqueue([fn, arg] {
    run_host_func_flagged(fn, arg);
    return Status();
  });
  return Status();
}

// ---- IPC ----

Status SimulatedRuntime::ipc_get_handle(const void* ptr, IpcHandle* out) {
  if (!ptr || !out) return error(ACCORD_ERR_INVALID_ARGUMENT, "ipc_get_handle(%p): null pointer or output", ptr);
  return memory_.export_handle(ptr, out);
}

Status SimulatedRuntime::ipc_open_handle(int device, const IpcHandle& h, void** out) {
  ACCORD_TRY(to_physical(&device, "ipc_open_handle"));
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: ipc_open_handle: null output", device);
  if (h.magic != IpcHandle::kMagic)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: ipc_open_handle: not an IPC handle (bad magic 0x%08x)",
                 device, h.magic);
  if (h.runtime != static_cast<uint32_t>(IpcRuntime::kSimulated))
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: ipc_open_handle: the handle comes from the %s runtime; "
                 "every rank must use the same runtime (is ACCORD_SIM_TOPO set for all of them?)", device,
                 h.runtime == static_cast<uint32_t>(IpcRuntime::kCuda) ? "CUDA" : "an unknown");
  if (h.device < 0 || h.device >= system_.gpu_count())
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: ipc_open_handle: the handle names device %d, but %s has "
                 "devices 0-%d; do all ranks simulate the same machine?", device, h.device, system_.source.c_str(),
                 system_.gpu_count() - 1);
  if (h.device != device) {
    // cudaIpcMemLazyEnablePeerAccess: opening enables peer access, or fails as enabling would.
    if (!system_.p2p(device, h.device))
      return error(ACCORD_ERR_UNSUPPORTED, "device %d: ipc_open_handle of device %d's memory: %s (simulated %s: "
                   "%s); stage through pinned host memory instead", device, h.device, kPeerAccessUnsupportedText,
                   system_.source.c_str(), system_.p2p_reason(device, h.device).c_str());
    std::lock_guard<std::mutex> lock(mu_);
    peer_[static_cast<size_t>(device * system_.gpu_count() + h.device)] = 1;
  }
  return memory_.import_handle(h, out);
}

Status SimulatedRuntime::ipc_close_handle(void* ptr) {
  if (!ptr) return error(ACCORD_ERR_INVALID_ARGUMENT, "ipc_close_handle: null pointer");
  ACCORD_TRY(wait_idle(-1, false, "ipc_close_handle", "cudaIpcCloseMemHandle synchronizes"));
  return memory_.close_imported(ptr);
}

}  // namespace accord

namespace accord {

// ---- registered host memory, flags, the caller's streams ----

Status SimulatedRuntime::register_host(void* ptr, size_t bytes) {
  ACCORD_TRY(wait_idle(-1, false, "register_host", "cudaHostRegister synchronizes"));
  return memory_.register_pinned(ptr, bytes);
}

Status SimulatedRuntime::unregister_host(void* ptr) {
  // As cudaHostUnregister: queued work never touches memory given back.
  ACCORD_TRY(wait_idle(-1, false, "unregister_host", "cudaHostUnregister synchronizes"));
  return memory_.unregister_pinned(ptr);
}

// Each simulated stream has its own thread, so the wait blocks only its own stream: the
// simulation of cuStreamWaitValue64. The flag is polled with short sleeps after a spin: it is
// set by a host thread after a whole collective, so microseconds do not matter.
Status SimulatedRuntime::stream_wait_flag(Stream stream, const std::atomic<uint64_t>* flag, uint64_t value) {
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(find_stream(stream, "stream_wait_flag", &s));
  if (!flag) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: stream_wait_flag: null flag", s->device());
  s->enqueue([flag, value] {
    for (int spin = 0; flag->load(std::memory_order_acquire) < value; ++spin) {
      if (spin < 1000)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return Status();
  });
  return Status();
}

// ---- stream memory operations (Note [Stream memory operations], device_runtime.hpp) ----

Status SimulatedRuntime::write_value(Stream stream, void* ptr, uint64_t value, size_t bytes, const char* op) {
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(not_in_host_func(op));
  ACCORD_TRY(find_stream(stream, op, &s));
  if (reinterpret_cast<uintptr_t>(ptr) % bytes != 0)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: %s(%p): the word must be aligned to %zu bytes "
                 "(cudaErrorInvalidValue)", s->device(), op, ptr, bytes);
  ACCORD_TRY(check_device_range(s->device(), ptr, bytes, true, op, "ptr", nullptr));
  s->enqueue([ptr, value, bytes] {
    if (bytes == 4)
      __atomic_store_n(static_cast<uint32_t*>(ptr), static_cast<uint32_t>(value), __ATOMIC_RELEASE);
    else
      __atomic_store_n(static_cast<uint64_t*>(ptr), value, __ATOMIC_RELEASE);
    return Status();
  });
  return Status();
}

// The stream's thread polls the word (a yield, then 20 us sleeps: the word is written by
// another stream's thread or another process, so a few microseconds do not matter), and gives
// up when the stream is cancelled or after stall_ms, breaking the stream with an error that
// names the word, the value it waited for and the value it saw.
Status SimulatedRuntime::wait_value(Stream stream, const void* ptr, uint64_t value, WaitCondition condition,
                                    size_t bytes, const char* op) {
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(not_in_host_func(op));
  ACCORD_TRY(find_stream(stream, op, &s));
  if (condition != WaitCondition::kGeq && condition != WaitCondition::kEq)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: %s: unknown condition %d", s->device(), op,
                 static_cast<int>(condition));
  if (reinterpret_cast<uintptr_t>(ptr) % bytes != 0)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: %s(%p): the word must be aligned to %zu bytes "
                 "(cudaErrorInvalidValue)", s->device(), op, ptr, bytes);
  ACCORD_TRY(check_device_range(s->device(), ptr, bytes, true, op, "ptr", nullptr));
  sim::SimStream* raw = s.get();  // the work runs on this stream's thread, while it lives
  const int64_t stall_ms = options_.stall_ms;
  const int device = s->device();
  s->enqueue([raw, ptr, value, condition, bytes, stall_ms, device, op, id = stream.id] {
    auto load = [&]() -> uint64_t {
      return bytes == 4 ? __atomic_load_n(static_cast<const uint32_t*>(ptr), __ATOMIC_ACQUIRE)
                        : __atomic_load_n(static_cast<const uint64_t*>(ptr), __ATOMIC_ACQUIRE);
    };
    auto satisfied = [&](uint64_t now) {
      if (condition == WaitCondition::kEq) return now == value;
      return bytes == 4 ? static_cast<int32_t>(static_cast<uint32_t>(now) - static_cast<uint32_t>(value)) >= 0
                        : static_cast<int64_t>(now - value) >= 0;
    };
    const char* cond = condition == WaitCondition::kEq ? "==" : ">=";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(stall_ms);
    for (uint32_t spin = 0;; ++spin) {
      const uint64_t now = load();
      if (satisfied(now)) return Status();
      if (raw->cancelled())
        return error(ACCORD_ERR_ABORTED, "device %d: stream %llu: %s(%p %s %llu) ended unsatisfied (the word "
                     "is %llu) because the stream or its runtime was destroyed", device,
                     (unsigned long long)id, op, ptr, cond, (unsigned long long)value, (unsigned long long)now);
      if ((spin & 255) == 255 && std::chrono::steady_clock::now() > deadline)
        return error(ACCORD_ERR_TIMEOUT, "device %d: stream %llu: %s(%p %s %llu): the word is still %llu after "
                     "%lld ms; a GPU would wait for ever (did the process that writes it die?); "
                     "ACCORD_SIM_STALL_MS sets the limit", device, (unsigned long long)id, op, ptr, cond,
                     (unsigned long long)value, (unsigned long long)now, (long long)stall_ms);
      if (spin < 256)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  return Status();
}

Status SimulatedRuntime::stream_write_value32(Stream stream, void* ptr, uint32_t value) {
  return write_value(stream, ptr, value, 4, "stream_write_value32");
}
Status SimulatedRuntime::stream_write_value64(Stream stream, void* ptr, uint64_t value) {
  return write_value(stream, ptr, value, 8, "stream_write_value64");
}
Status SimulatedRuntime::stream_wait_value32(Stream stream, const void* ptr, uint32_t value,
                                             WaitCondition condition) {
  return wait_value(stream, ptr, value, condition, 4, "stream_wait_value32");
}
Status SimulatedRuntime::stream_wait_value64(Stream stream, const void* ptr, uint64_t value,
                                             WaitCondition condition) {
  return wait_value(stream, ptr, value, condition, 8, "stream_wait_value64");
}

Status SimulatedRuntime::wrap_user_stream(int device, void* user_stream, Stream* out) {
  ACCORD_TRY(to_physical(&device, "wrap_user_stream"));
  if (!out) return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: wrap_user_stream: null output", device);
  std::shared_ptr<sim::SimStream> s;
  const Stream st{static_cast<uint64_t>(reinterpret_cast<uintptr_t>(user_stream))};
  if (st.id == 1 || st.id == 2)
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "stream %p is CUDA's %s stream (NCCL's stream 0 is the legacy one), which the "
                 "simulated GPUs do not have; create a stream with accord_stream_create",
                 user_stream, st.id == 1 ? "legacy default" : "per-thread default");
  Status found = find_stream(st, "accord stream", &s);
  if (!found.ok())
    return error(ACCORD_ERR_INVALID_ARGUMENT, "stream %p is not a stream of the simulated GPUs (create it with "
                 "accord_stream_create): %s", user_stream, found.message().c_str());
  if (s->device() != device)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "stream %p belongs to simulated GPU %d, not to GPU %d of the "
                 "communicator; use a stream of the communicator's device", user_stream, s->device(), device);
  *out = st;
  return Status();
}

void* SimulatedRuntime::user_stream(Stream stream) const {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(stream.id));
}

Status SimulatedRuntime::stream_capturing(Stream stream, bool* out) {
  std::shared_ptr<sim::SimStream> s;
  ACCORD_TRY(find_stream(stream, "stream_capturing", &s));
  if (!out)
    return error(ACCORD_ERR_INVALID_ARGUMENT, "device %d: stream_capturing: null output",
                 s->device());
  *out = false;  // no CUDA graphs here
  return Status();
}

}  // namespace accord
