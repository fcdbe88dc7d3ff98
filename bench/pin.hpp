// Pins the calling thread to one CPU (core_pingpong, slot_copy). Header-only: those two link
// different libraries (none, and the internal one) and share no objects.
#pragma once

#include <pthread.h>
#include <sched.h>

namespace accord::bench {

// False when the CPU is not online or outside this process's CPU set.
inline bool pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

}  // namespace accord::bench
