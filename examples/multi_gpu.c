/* One process driving several GPUs, as the seeds' "towers" did, but reducing on the devices:
 * accord_comm_init_all with a device list makes one rank per GPU, and one thread enqueues an
 * all-reduce per GPU on that GPU's stream inside a group. On a machine without GPUs it runs
 * on simulated ones:
 *   ACCORD_SIM_TOPO=../shared/fixtures/topologies/dgx1-v100-topo-m.txt
 * build/examples/example_multi_gpu 4 NEEDS the GPU path (branch wip/gpu: accord_device.h, device
 * buffers on streams); it is built only when include/accord/accord_device.h exists. */
#include <accord/accord.h>
#include <accord/accord_device.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                       \
  do {                                                                    \
    accord_status_t st_ = (call);                                         \
    if (st_ != ACCORD_SUCCESS) {                                          \
      fprintf(stderr, "%s failed: %s\n", #call, accord_last_error(NULL)); \
      return 1;                                                           \
    }                                                                     \
  } while (0)

enum { kMaxGpus = 16, kCount = 1 << 20 };

int main(int argc, char** argv) {
  int ngpus = 0;
  CHECK(accord_device_count(&ngpus));
  int n = argc > 1 ? atoi(argv[1]) : ngpus;
  if (n < 1 || n > ngpus || n > kMaxGpus) {
    printf(
        "example_multi_gpu: %d GPUs here (set ACCORD_SIM_TOPO for simulated ones), asked for %d: "
        "SKIP\n",
        ngpus, n);
    return 77;
  }
  int devlist[kMaxGpus];
  accord_comm_t comms[kMaxGpus];
  accord_stream_t streams[kMaxGpus];
  float* grads[kMaxGpus];
  float* host = malloc(kCount * sizeof *host);
  for (int d = 0; d < n; ++d) devlist[d] = d;
  CHECK(accord_comm_init_all(comms, n, devlist));
  for (int d = 0; d < n; ++d) {
    CHECK(accord_stream_create(&streams[d], d));
    CHECK(accord_device_alloc((void**)&grads[d], kCount * sizeof(float), d));
    for (int i = 0; i < kCount; ++i) host[i] = (float)(d + i % 3); /* this tower's gradients */
    CHECK(accord_device_memcpy(grads[d], host, kCount * sizeof(float)));
  }
  /* One thread, several ranks: the group lets every GPU's call be queued before any waits. */
  CHECK(accord_group_start());
  for (int d = 0; d < n; ++d)
    CHECK(accord_all_reduce(grads[d], grads[d], kCount, ACCORD_FLOAT32, ACCORD_AVG, comms[d],
                            streams[d]));
  CHECK(accord_group_end());
  int ok = 1;
  for (int d = 0; d < n; ++d) {
    CHECK(accord_stream_synchronize(streams[d]));
    CHECK(accord_device_memcpy(host, grads[d], kCount * sizeof(float)));
    /* average over GPUs of (d + i%3) = (n-1)/2 + i%3, exact in float */
    for (int i = 0; i < kCount; ++i)
      if (host[i] != (float)(n - 1) / 2 + (float)(i % 3)) ok = 0;
  }
  for (int d = 0; d < n; ++d) {
    CHECK(accord_device_free(grads[d]));
    CHECK(accord_stream_destroy(streams[d]));
    CHECK(accord_comm_destroy(comms[d]));
  }
  free(host);
  printf("example_multi_gpu: %d GPUs, averaged %d floats on the devices: %s\n", n, kCount,
         ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
