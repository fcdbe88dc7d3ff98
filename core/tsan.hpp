// Telling ThreadSanitizer about an order it cannot see (no-ops without -fsanitize=thread).
//
// ThreadSanitizer learns happens-before from the address of an atomic. With ranks as threads
// of one process, each rank maps its peers' shared-memory segments itself, so one rank's store
// of a flag and another's load of it are at two different addresses and order nothing for it.
// Where the data those flags guard has one address for both ranks (a device FIFO's slot in the
// receiver's GPU memory, Note [ThreadSanitizer and device FIFOs] in transport/shm/fifo.cpp; a
// user buffer a peer thread reads or writes, Note [Single copy] in
// collectives/single_copy.cpp), the order is told by hand: release on an address of that data
// where a flag is stored, acquire on the same address where the flag is seen.
#pragma once

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#define ACCORD_TSAN_ACQUIRE(p) __tsan_acquire(const_cast<void*>(static_cast<const void*>(p)))
#define ACCORD_TSAN_RELEASE(p) __tsan_release(const_cast<void*>(static_cast<const void*>(p)))
#else
#define ACCORD_TSAN_ACQUIRE(p) static_cast<void>(p)
#define ACCORD_TSAN_RELEASE(p) static_cast<void>(p)
#endif
