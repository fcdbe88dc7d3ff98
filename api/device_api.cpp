// The public device API (include/accord/accord_device.h) over the process's device runtime
// (process_device_runtime): the runtime every communicator of this process uses.
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "api/handles.hpp"
#include "core/settings.hpp"
#include "include/accord/accord_device.h"
#include "transport/device/device_runtime.hpp"

namespace accord {
namespace {

std::mutex g_streams_mutex;
std::map<void*, Stream>& g_streams = *new std::map<void*, Stream>();  // accord_stream_t -> Stream

accord_status_t with_runtime(const char* fn, DeviceRuntime** rt) {
  Settings settings;
  Status s = load_settings(&settings);
  if (!s.ok()) return report(nullptr, s);
  std::string why;
  *rt = process_device_runtime(settings, &why);
  if (*rt == nullptr)
    return report(nullptr,
                  error(ACCORD_ERR_UNSUPPORTED, "%s: there is no GPU: %s", fn, why.c_str()));
  return ACCORD_SUCCESS;
}

accord_status_t find_stream(accord_stream_t stream, const char* fn, Stream* out) {
  std::lock_guard<std::mutex> lock(g_streams_mutex);
  auto it = g_streams.find(stream);
  if (it == g_streams.end())
    return report(nullptr, error(ACCORD_ERR_INVALID_ARGUMENT,
                                 "%s: stream %p was not made by accord_stream_create "
                                 "(or was destroyed)",
                                 fn, stream));
  *out = it->second;
  return ACCORD_SUCCESS;
}

// The runtime and the Stream behind an accord_stream_t made by accord_stream_create.
accord_status_t runtime_and_stream(accord_stream_t stream, const char* fn, DeviceRuntime** rt,
                                   Stream* out) {
  accord_status_t c = with_runtime(fn, rt);
  return c == ACCORD_SUCCESS ? find_stream(stream, fn, out) : c;
}

}  // namespace
}  // namespace accord

using namespace accord;

extern "C" {

accord_status_t accord_device_count(int* count) {
  if (count == nullptr)
    return report(nullptr,
                  error(ACCORD_ERR_INVALID_ARGUMENT, "accord_device_count: count is NULL"));
  Settings settings;
  Status s = load_settings(&settings);
  if (!s.ok()) return report(nullptr, s);
  DeviceRuntime* rt = process_device_runtime(settings);
  *count = rt == nullptr ? 0 : rt->device_count();
  return ACCORD_SUCCESS;
}

accord_status_t accord_device_alloc(void** ptr, size_t bytes, int device) {
  if (ptr == nullptr)
    return report(nullptr, error(ACCORD_ERR_INVALID_ARGUMENT, "accord_device_alloc: ptr is NULL"));
  *ptr = nullptr;
  DeviceRuntime* rt = nullptr;
  accord_status_t c = with_runtime("accord_device_alloc", &rt);
  if (c != ACCORD_SUCCESS) return c;
  return report(nullptr, rt->alloc_device(device, bytes, ptr));
}

accord_status_t accord_device_free(void* ptr) {
  if (ptr == nullptr) return ACCORD_SUCCESS;
  DeviceRuntime* rt = nullptr;
  accord_status_t c = with_runtime("accord_device_free", &rt);
  if (c != ACCORD_SUCCESS) return c;
  return report(nullptr, rt->free_device(ptr));
}

accord_status_t accord_device_memcpy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return ACCORD_SUCCESS;
  if (dst == nullptr || src == nullptr)
    return report(nullptr,
                  error(ACCORD_ERR_INVALID_ARGUMENT, "accord_device_memcpy: dst or src is NULL"));
  DeviceRuntime* rt = nullptr;
  accord_status_t c = with_runtime("accord_device_memcpy", &rt);
  if (c != ACCORD_SUCCESS) return c;
  PointerInfo d, s;
  Status st = rt->pointer_info(dst, &d);
  if (st.ok()) st = rt->pointer_info(src, &s);
  if (!st.ok()) return report(nullptr, st);
  const bool dd = d.kind == MemoryKind::kDevice, sd = s.kind == MemoryKind::kDevice;
  if (dd && sd && d.device != s.device) {
    // Two GPUs: staged through the host, so it works whether or not they can peer.
    std::vector<uint8_t> bounce(bytes);
    st = rt->copy(CopyKind::kDeviceToHost, s.device, bounce.data(), src, bytes);
    if (st.ok()) st = rt->copy(CopyKind::kHostToDevice, d.device, dst, bounce.data(), bytes);
  } else if (dd && sd) {
    st = rt->copy(CopyKind::kDeviceToDevice, d.device, dst, src, bytes);
  } else if (dd) {
    st = rt->copy(CopyKind::kHostToDevice, d.device, dst, src, bytes);
  } else if (sd) {
    st = rt->copy(CopyKind::kDeviceToHost, s.device, dst, src, bytes);
  } else {
    std::memmove(dst, src, bytes);
  }
  return report(nullptr, st.prefix("accord_device_memcpy: "));
}

accord_status_t accord_stream_create(accord_stream_t* stream, int device) {
  if (stream == nullptr)
    return report(nullptr,
                  error(ACCORD_ERR_INVALID_ARGUMENT, "accord_stream_create: stream is NULL"));
  *stream = nullptr;
  DeviceRuntime* rt = nullptr;
  accord_status_t c = with_runtime("accord_stream_create", &rt);
  if (c != ACCORD_SUCCESS) return c;
  Stream s;
  Status st = rt->create_stream(device, &s);
  if (!st.ok()) return report(nullptr, st);
  *stream = rt->user_stream(s);
  std::lock_guard<std::mutex> lock(g_streams_mutex);
  g_streams[*stream] = s;
  return ACCORD_SUCCESS;
}

accord_status_t accord_stream_synchronize(accord_stream_t stream) {
  DeviceRuntime* rt = nullptr;
  Stream s;
  accord_status_t c = runtime_and_stream(stream, "accord_stream_synchronize", &rt, &s);
  if (c != ACCORD_SUCCESS) return c;
  return report(nullptr, rt->synchronize_stream(s));
}

accord_status_t accord_stream_destroy(accord_stream_t stream) {
  DeviceRuntime* rt = nullptr;
  Stream s;
  accord_status_t c = runtime_and_stream(stream, "accord_stream_destroy", &rt, &s);
  if (c != ACCORD_SUCCESS) return c;
  {
    std::lock_guard<std::mutex> lock(g_streams_mutex);
    g_streams.erase(stream);
  }
  return report(nullptr, rt->destroy_stream(s));
}

}  // extern "C"
