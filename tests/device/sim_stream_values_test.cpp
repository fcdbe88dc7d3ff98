// Stream memory operations (Note [Stream memory operations], device_runtime.hpp) on simulated
// GPUs: work after a wait starts only once the word satisfies the condition (GEQ as CUDA
// defines it, wrapping; EQ; 32 and 64 bits), a write lands in stream order after the work
// before it, within one process and between two processes through an IPC-shared word; a wait
// whose word never comes ends with an error when the stream or runtime goes away or the stall
// limit passes. And Note [Simulated time slices] (sim_timeslice.hpp): two processes on one
// simulated GPU without MPS; a kernel spinning on a word that the other process's kernel
// writes gets through only by a slice expiry, the same hand-off through stream memory
// operations needs none. The checks are on values and counts, never on wall-clock times.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <vector>
#include <chrono>
#include <thread>

#include "tests/device/fork_util.hpp"
#include "tests/device/sim_util.hpp"

namespace accord::testing {
namespace {

using Cond = DeviceRuntime::WaitCondition;

// Reads a word of device memory (a synchronous copy: it does not wait for streams).
template <class T>
T peek(SimulatedRuntime* rt, int device, const void* p) {
  T v{};
  Status st = rt->copy(CopyKind::kDeviceToHost, device, &v, p, sizeof v);
  EXPECT_TRUE(st.ok()) << st.message();
  return v;
}

// Gives a stream whose work could wrongly run a chance to do so: the negative checks below
// can only pass wrongly (never fail wrongly) on a loaded machine.
void let_streams_run() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

// A simulated DGX-1 with two 8-byte words of device 0 (zero): `word`, the waited-on word, and
// `done`, written after the wait; and two streams of device 0.
struct Rig {
  explicit Rig(SimOptions options = {}) : rt(make_sim(kDgx1, options)) {
    if (!rt) return;
    uint64_t zero = 0;
    for (void** p : {&word, &done}) {
      EXPECT_TRUE(rt->alloc_device(0, 8, p).ok());
      EXPECT_TRUE(rt->copy(CopyKind::kHostToDevice, 0, *p, &zero, 8).ok());
    }
    EXPECT_TRUE(rt->create_stream(0, &waiter).ok());
    EXPECT_TRUE(rt->create_stream(0, &writer).ok());
  }
  ~Rig() {
    if (!rt) return;
    for (Stream s : {waiter, writer}) (void)rt->destroy_stream(s);  // fails on a stream destroyed already
    (void)rt->free_device(word);
    (void)rt->free_device(done);
  }
  std::unique_ptr<SimulatedRuntime> rt;
  void* word = nullptr;
  void* done = nullptr;
  Stream waiter, writer;
};

TEST(SimStreamValues, Wait32GeqAndEqReleaseTheWorkAfterThemOnlyWhenSatisfied) {
  Rig r;
  ASSERT_TRUE(r.rt);
  SimulatedRuntime* rt = r.rt.get();
  const Stream waiter = r.waiter, writer = r.writer;

  // GEQ 5: 4 does not release it, 6 does.
  ASSERT_OK(rt->stream_wait_value32(waiter, r.word, 5, Cond::kGeq));
  ASSERT_OK(rt->stream_write_value32(waiter, r.done, 1));
  ASSERT_OK(rt->stream_write_value32(writer, r.word, 4));
  ASSERT_OK(rt->synchronize_stream(writer));
  let_streams_run();
  EXPECT_EQ(peek<uint32_t>(rt, 0, r.done), 0u) << "ran after the wait with the word at 4 < 5";
  ASSERT_OK(rt->stream_write_value32(writer, r.word, 6));
  ASSERT_OK(rt->synchronize_stream(waiter));
  EXPECT_EQ(peek<uint32_t>(rt, 0, r.done), 1u);

  // EQ 7: 8 satisfies GEQ but not EQ; 7 releases it.
  ASSERT_OK(rt->stream_wait_value32(waiter, r.word, 7, Cond::kEq));
  ASSERT_OK(rt->stream_write_value32(waiter, r.done, 2));
  ASSERT_OK(rt->stream_write_value32(writer, r.word, 8));
  ASSERT_OK(rt->synchronize_stream(writer));
  let_streams_run();
  EXPECT_EQ(peek<uint32_t>(rt, 0, r.done), 1u) << "EQ 7 released by 8";
  ASSERT_OK(rt->stream_write_value32(writer, r.word, 7));
  ASSERT_OK(rt->synchronize_stream(waiter));
  EXPECT_EQ(peek<uint32_t>(rt, 0, r.done), 2u);

  // GEQ compares as CUDA does, (int32_t)(word - value) >= 0: a counter that wrapped is ahead.
  ASSERT_OK(rt->stream_write_value32(writer, r.word, 3));
  ASSERT_OK(rt->synchronize_stream(writer));
  ASSERT_OK(rt->stream_wait_value32(waiter, r.word, 0xFFFFFFF0u, Cond::kGeq));  // 3 - 0xFFFFFFF0 = 19
  ASSERT_OK(rt->stream_write_value32(waiter, r.done, 3));
  ASSERT_OK(rt->synchronize_stream(waiter));
  EXPECT_EQ(peek<uint32_t>(rt, 0, r.done), 3u);

}

TEST(SimStreamValues, Wait64ComparesAllSixtyFourBits) {
  Rig r;
  ASSERT_TRUE(r.rt);
  SimulatedRuntime* rt = r.rt.get();
  const Stream waiter = r.waiter, writer = r.writer;
  const uint64_t big = uint64_t{1} << 40;
  // EQ 2^40 while the word is 0: the low 32 bits agree, a truncating wait would run.
  ASSERT_OK(rt->stream_wait_value64(waiter, r.word, big, Cond::kEq));
  ASSERT_OK(rt->stream_write_value64(waiter, r.done, big + 1));
  let_streams_run();
  EXPECT_EQ(peek<uint64_t>(rt, 0, r.done), 0u);
  ASSERT_OK(rt->stream_write_value64(writer, r.word, big - 1));  // not equal, and less
  ASSERT_OK(rt->synchronize_stream(writer));
  let_streams_run();
  EXPECT_EQ(peek<uint64_t>(rt, 0, r.done), 0u);
  ASSERT_OK(rt->stream_write_value64(writer, r.word, big));
  ASSERT_OK(rt->synchronize_stream(waiter));
  EXPECT_EQ(peek<uint64_t>(rt, 0, r.done), big + 1);
  // GEQ 2^41: 2^40 + 5 is less.
  ASSERT_OK(rt->stream_wait_value64(waiter, r.word, big * 2, Cond::kGeq));
  ASSERT_OK(rt->stream_write_value64(waiter, r.done, 9));
  ASSERT_OK(rt->stream_write_value64(writer, r.word, big + 5));
  ASSERT_OK(rt->synchronize_stream(writer));
  let_streams_run();
  EXPECT_EQ(peek<uint64_t>(rt, 0, r.done), big + 1);
  ASSERT_OK(rt->stream_write_value64(writer, r.word, big * 3));
  ASSERT_OK(rt->synchronize_stream(waiter));
  EXPECT_EQ(peek<uint64_t>(rt, 0, r.done), 9u);
}

// A gate: a host function that blocks its stream until the test opens it.
struct Gate {
  std::atomic<int> open{0};
  static void wait(void* arg) {
    auto* g = static_cast<Gate*>(arg);
    while (g->open.load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
};

TEST(SimStreamValues, WriteLandsInStreamOrderAfterThePriorWork) {
  auto rt = make_sim(kDgx1);
  ASSERT_TRUE(rt);
  constexpr size_t kBytes = 4099;  // prime-ish, unaligned tail
  void* data;
  void* pinned;
  ASSERT_OK(rt->alloc_device(1, kBytes, &data));
  ASSERT_OK(rt->alloc_host_pinned(8, &pinned));  // the word in pinned host memory this time
  *static_cast<uint64_t*>(pinned) = 0;
  Stream producer, consumer;
  ASSERT_OK(rt->create_stream(1, &producer));
  ASSERT_OK(rt->create_stream(1, &consumer));
  Gate gate;
  ASSERT_OK(rt->launch_host_func(producer, Gate::wait, &gate));
  ASSERT_OK(rt->memset_async(data, 0x5a, kBytes, producer));
  ASSERT_OK(rt->stream_write_value64(producer, pinned, 77));
  // The consumer copies the data once the word says it is there.
  std::vector<uint8_t> got(kBytes, 0);
  void* staging;
  ASSERT_OK(rt->alloc_host_pinned(kBytes, &staging));
  std::memset(staging, 0, kBytes);
  ASSERT_OK(rt->stream_wait_value64(consumer, pinned, 77, Cond::kEq));
  ASSERT_OK(rt->copy_async(CopyKind::kDeviceToHost, staging, data, kBytes, consumer));
  let_streams_run();
  EXPECT_EQ(__atomic_load_n(static_cast<uint64_t*>(pinned), __ATOMIC_ACQUIRE), 0u)
      << "the write ran before the gated work before it";
  EXPECT_EQ(static_cast<uint8_t*>(staging)[0], 0) << "the copy ran before the wait was satisfied";
  gate.open.store(1);
  ASSERT_OK(rt->synchronize_stream(consumer));
  EXPECT_EQ(*static_cast<uint64_t*>(pinned), 77u);
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(static_cast<uint8_t*>(staging)[i], 0x5a) << "byte " << i;
  ASSERT_OK(rt->destroy_stream(producer));
  ASSERT_OK(rt->destroy_stream(consumer));
  ASSERT_OK(rt->free_device(data));
  ASSERT_OK(rt->free_host_pinned(pinned));
  ASSERT_OK(rt->free_host_pinned(staging));
}

TEST(SimStreamValues, BadArguments) {
  auto rt = make_sim(kTf4);
  ASSERT_TRUE(rt);
  void* d;
  ASSERT_OK(rt->alloc_device(3, 64, &d));
  Stream s, other;
  ASSERT_OK(rt->create_stream(3, &s));
  ASSERT_OK(rt->create_stream(1, &other));
  char* c = static_cast<char*>(d);
  EXPECT_TRUE(fails_with(rt->stream_write_value32(s, c + 2, 1), ACCORD_ERR_INVALID_ARGUMENT, "aligned to 4"));
  EXPECT_TRUE(fails_with(rt->stream_wait_value64(s, c + 4, 1, Cond::kEq), ACCORD_ERR_INVALID_ARGUMENT,
                         "aligned to 8"));
  EXPECT_FALSE(rt->stream_write_value32(s, c + 64, 1).ok()) << "past the end";
  uint64_t host = 0;
  EXPECT_FALSE(rt->stream_wait_value64(s, &host, 1, Cond::kGeq).ok()) << "pageable host memory";
  // Device 1 cannot peer with device 3 on this machine.
  EXPECT_FALSE(rt->stream_write_value64(other, d, 1).ok());
  EXPECT_TRUE(fails_with(rt->stream_write_value64(Stream{999}, d, 1), ACCORD_ERR_INVALID_ARGUMENT, "does not exist"));
  EXPECT_TRUE(fails_with(rt->stream_wait_value32(s, d, 1, static_cast<Cond>(7)), ACCORD_ERR_INVALID_ARGUMENT,
                         "unknown condition"));
  ASSERT_OK(rt->destroy_stream(s));
  ASSERT_OK(rt->destroy_stream(other));
  ASSERT_OK(rt->free_device(d));
}

// A wait whose word never comes: the stall limit breaks the stream with an error naming the
// word; destroying the stream, or the runtime, ends the wait instead of hanging.
TEST(SimStreamValues, AWaitOnAWordThatNeverComesEndsWithAnError) {
  SimOptions o;
  o.stall_ms = 200;
  Rig r(o);
  ASSERT_TRUE(r.rt);
  ASSERT_OK(r.rt->stream_wait_value32(r.waiter, r.word, 1, Cond::kEq));
  ASSERT_OK(r.rt->stream_write_value32(r.waiter, r.done, 1));
  Status st = r.rt->synchronize_stream(r.waiter);
  EXPECT_TRUE(fails_with(st, ACCORD_ERR_TIMEOUT, "stream_wait_value32")) << st.message();
  EXPECT_NE(st.message().find("still 0"), std::string::npos) << st.message();
  EXPECT_EQ(peek<uint32_t>(r.rt.get(), 0, r.done), 0u) << "the work after a failed wait must not run";

  // Destroying the stream: the wait ends at once, not after the stall limit (60 s here).
  Rig patient;
  ASSERT_TRUE(patient.rt);
  ASSERT_OK(patient.rt->stream_wait_value64(patient.waiter, patient.word, 1, Cond::kGeq));
  ASSERT_OK(patient.rt->stream_write_value64(patient.waiter, patient.done, 1));
  ASSERT_OK(patient.rt->destroy_stream(patient.waiter));
  EXPECT_EQ(peek<uint64_t>(patient.rt.get(), 0, patient.done), 0u);
  // Destroying the runtime with a wait pending returns too (the test would time out otherwise).
  ASSERT_OK(patient.rt->stream_wait_value64(patient.writer, patient.word, 1, Cond::kGeq));
  patient.rt.reset();
}

// Two forked processes: A exports memory and sends its IPC handle down `handle`; B sends a
// byte up `done` when it finished with the memory, so that A frees nothing B still uses. Both
// must exit 0.
struct Pipes {
  int handle[2];
  int done[2];
};
void run_pair(const std::function<void(const Pipes&)>& a, const std::function<void(const Pipes&)>& b) {
  Pipes p;
  ASSERT_EQ(pipe(p.handle), 0);
  ASSERT_EQ(pipe(p.done), 0);
  const pid_t pa = spawn([&] { a(p); });
  const pid_t pb = spawn([&] { b(p); });
  for (int fd : {p.handle[0], p.handle[1], p.done[0], p.done[1]}) close(fd);
  int status_a = 0, status_b = 0;
  ASSERT_EQ(waitpid(pb, &status_b, 0), pb);
  ASSERT_EQ(waitpid(pa, &status_a, 0), pa);
  EXPECT_TRUE(WIFEXITED(status_b) && WEXITSTATUS(status_b) == 0) << "B status " << status_b;
  EXPECT_TRUE(WIFEXITED(status_a) && WEXITSTATUS(status_a) == 0) << "A status " << status_a;
}

// Two processes: A owns the words (device 0) and waits on `word` before writing `ack`; B opens
// them through IPC on device 0, writes a value that does not release A, sees no ack, writes
// the one that does, and waits on its own stream for the ack.
TEST(SimStreamValues, HandOffBetweenTwoProcessesThroughAnIpcWord) {
  run_pair([&](const Pipes& p) {
    auto rt = make_sim(kDgx1);
    CHILD_CHECK(rt != nullptr, "no runtime");
    void* words;
    CHILD_OK(rt->alloc_device(0, 16, &words));
    uint64_t zero[2] = {0, 0};
    CHILD_OK(rt->copy(CopyKind::kHostToDevice, 0, words, zero, 16));
    auto* word = static_cast<uint64_t*>(words);
    Stream s;
    CHILD_OK(rt->create_stream(0, &s));
    CHILD_OK(rt->stream_wait_value64(s, word, 7, Cond::kGeq));
    CHILD_OK(rt->stream_write_value64(s, word + 1, 1));
    IpcHandle h;
    CHILD_OK(rt->ipc_get_handle(words, &h));
    CHILD_CHECK(write_all(p.handle[1], &h, sizeof h), "write handle");
    CHILD_OK(rt->synchronize_stream(s));
    uint64_t got[2];
    CHILD_OK(rt->copy(CopyKind::kDeviceToHost, 0, got, words, 16));
    CHILD_CHECK(got[0] == 7 && got[1] == 1, "word %llu ack %llu", (unsigned long long)got[0],
                (unsigned long long)got[1]);
    char c;
    CHILD_CHECK(read_all(p.done[0], &c, 1), "B died before it finished");
    CHILD_OK(rt->destroy_stream(s));
    CHILD_OK(rt->free_device(words));
    _exit(0);
  }, [&](const Pipes& p) {
    IpcHandle h;
    CHILD_CHECK(read_all(p.handle[0], &h, sizeof h), "A died before sending the handle");
    auto rt = make_sim(kDgx1);
    CHILD_CHECK(rt != nullptr, "no runtime");
    void* words;
    CHILD_OK(rt->ipc_open_handle(0, h, &words));
    auto* word = static_cast<uint64_t*>(words);
    Stream s;
    CHILD_OK(rt->create_stream(0, &s));
    CHILD_OK(rt->stream_write_value64(s, word, 6));
    CHILD_OK(rt->synchronize_stream(s));
    let_streams_run();
    uint64_t ack = 99;
    CHILD_OK(rt->copy(CopyKind::kDeviceToHost, 0, &ack, word + 1, 8));
    CHILD_CHECK(ack == 0, "A's work after its wait ran with the word at 6 < 7 (ack %llu)", (unsigned long long)ack);
    CHILD_OK(rt->stream_write_value64(s, word, 7));
    CHILD_OK(rt->stream_wait_value64(s, word + 1, 1, Cond::kEq));
    CHILD_OK(rt->synchronize_stream(s));
    CHILD_OK(rt->destroy_stream(s));
    CHILD_OK(rt->ipc_close_handle(words));
    CHILD_CHECK(write_all(p.done[1], "d", 1), "write done");
    _exit(0);
  });
}

// ---- Note [Simulated time slices] ----

struct SpinParams {
  uint32_t* word;     // A's kernel waits for 1 here, then writes 2
  uint32_t* started;  // A's kernel sets 1 when it runs
};
// Today's protocol: a kernel polls a word the other process's kernel writes, with a switch
// point between two polls as the device path's host executor has.
void spin_kernel(const void* p) {
  const auto* a = static_cast<const SpinParams*>(p);
  __atomic_store_n(a->started, 1u, __ATOMIC_RELEASE);
  while (__atomic_load_n(a->word, __ATOMIC_ACQUIRE) != 1) {
    if (!sim::timeslice_point()) return;
    std::this_thread::yield();
  }
  __atomic_store_n(a->word, 2u, __ATOMIC_RELEASE);
}
struct WriteParams {
  uint32_t* word;
  uint32_t value;
};
void write_kernel(const void* p) {
  const auto* a = static_cast<const WriteParams*>(p);
  // Some work first, with switch points: alone on the GPU, it never expires.
  for (int i = 0; i < 200; ++i) {
    if (!sim::timeslice_point()) return;
    std::this_thread::yield();
  }
  __atomic_store_n(a->word, a->value, __ATOMIC_RELEASE);
}
struct CheckParams {
  uint32_t* word;  // must be 1 when this kernel runs; it writes 2
  uint32_t* seen;
};
void check_kernel(const void* p) {
  const auto* a = static_cast<const CheckParams*>(p);
  __atomic_store_n(a->seen, __atomic_load_n(a->word, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
  __atomic_store_n(a->word, 2u, __ATOMIC_RELEASE);
}
const KernelDesc kSpin{"spin_on_word", nullptr, spin_kernel, 32};
const KernelDesc kWrite{"write_word", nullptr, write_kernel, 32};
const KernelDesc kCheck{"check_word", nullptr, check_kernel, 32};

// Runs the hand-off between two processes on GPU 0 of a DGX-1 sharing `slices` (slices of
// 1 ms): A owns the words; with `spin`, A's kernel spins on the word and B's kernel writes
// it; without, A's stream waits on the word (stream_wait_value32) before its kernel and B
// writes it after its kernel (stream_write_value32). Returns when both processes succeeded.
using MakeRuntime = std::function<std::unique_ptr<DeviceRuntime>()>;
void hand_off(const MakeRuntime& make, bool spin) {
  run_pair([&](const Pipes& p) {
    std::unique_ptr<DeviceRuntime> rt = make();
    CHILD_CHECK(rt != nullptr, "no runtime");
    void* mem;
    CHILD_OK(rt->alloc_device(0, 16, &mem));
    uint32_t zero[4] = {};
    CHILD_OK(rt->copy(CopyKind::kHostToDevice, 0, mem, zero, 16));
    auto* words = static_cast<uint32_t*>(mem);  // [0] word, [1] started, [2] seen
    Stream s;
    CHILD_OK(rt->create_stream(0, &s));
    CHILD_OK(rt->load_kernel(0, spin ? kSpin : kCheck));
    if (spin) {
      SpinParams kp{words, words + 1};
      CHILD_OK(rt->launch_kernel(kSpin, &kp, sizeof kp, s));
    } else {
      CHILD_OK(rt->stream_wait_value32(s, words, 1, Cond::kEq));
      CheckParams kp{words, words + 2};
      CHILD_OK(rt->launch_kernel(kCheck, &kp, sizeof kp, s));
    }
    IpcHandle h;
    CHILD_OK(rt->ipc_get_handle(mem, &h));
    CHILD_CHECK(write_all(p.handle[1], &h, sizeof h), "write handle");
    CHILD_OK(rt->synchronize_stream(s));
    uint32_t got[4];
    CHILD_OK(rt->copy(CopyKind::kDeviceToHost, 0, got, mem, 16));
    CHILD_CHECK(got[0] == 2, "A's kernel did not finish the hand-off: word %u", got[0]);
    CHILD_CHECK(spin || got[2] == 1, "A's kernel ran before the word came: it saw %u", got[2]);
    char c;
    CHILD_CHECK(read_all(p.done[0], &c, 1), "B died before it finished");
    CHILD_OK(rt->destroy_stream(s));
    CHILD_OK(rt->free_device(mem));
    _exit(0);
  }, [&](const Pipes& p) {
    IpcHandle h;
    CHILD_CHECK(read_all(p.handle[0], &h, sizeof h), "A died before sending the handle");
    std::unique_ptr<DeviceRuntime> rt = make();
    CHILD_CHECK(rt != nullptr, "no runtime");
    void* mem;
    CHILD_OK(rt->ipc_open_handle(0, h, &mem));
    auto* words = static_cast<uint32_t*>(mem);
    Stream s;
    CHILD_OK(rt->create_stream(0, &s));
    CHILD_OK(rt->load_kernel(0, kWrite));
    if (spin) {
      // A's kernel holds the slice before B's kernel asks for it.
      for (uint32_t started = 0; started == 0;) {
        CHILD_OK(rt->copy(CopyKind::kDeviceToHost, 0, &started, words + 1, 4));
        if (started == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      WriteParams kp{words, 1};
      CHILD_OK(rt->launch_kernel(kWrite, &kp, sizeof kp, s));
    } else {
      WriteParams kp{words + 3, 5};  // B's own part, then the hand-off word from the stream
      CHILD_OK(rt->launch_kernel(kWrite, &kp, sizeof kp, s));
      CHILD_OK(rt->stream_write_value32(s, words, 1));
    }
    CHILD_OK(rt->synchronize_stream(s));
    CHILD_OK(rt->destroy_stream(s));
    CHILD_OK(rt->ipc_close_handle(mem));
    CHILD_CHECK(write_all(p.done[1], "d", 1), "write done");
    _exit(0);
  });
}

// A simulated DGX-1 whose GPUs are time-sliced in `slices`, 1 ms slices.
MakeRuntime sliced(const std::shared_ptr<sim::TimeSlices>& slices) {
  return [slices]() -> std::unique_ptr<DeviceRuntime> {
    SimOptions o;
    o.timeslice_us = 1000;
    o.slices = slices;
    o.stall_ms = 20000;
    return make_sim(kDgx1, o);
  };
}

TEST(SimTimeSlices, ASpinningKernelGetsItsWordOnlyThroughASliceExpiry) {
  std::string why;
  auto slices = sim::TimeSlices::create(8, &why);
  ASSERT_TRUE(slices) << why;
  hand_off(sliced(slices), /*spin=*/true);
  const sim::SliceCounts c = slices->counts(0);
  EXPECT_GE(c.expiries, 1u) << "A's spinning kernel must have been switched out for B's";
  EXPECT_GE(c.switches, 2u) << "A -> B -> A";
  EXPECT_EQ(slices->counts(1).switches + slices->counts(1).expiries, 0u) << "GPU 1 was not used";
}

TEST(SimTimeSlices, TheSameHandOffThroughStreamMemoryOperationsNeedsNoExpiry) {
  std::string why;
  auto slices = sim::TimeSlices::create(8, &why);
  ASSERT_TRUE(slices) << why;
  hand_off(sliced(slices), /*spin=*/false);
  const sim::SliceCounts c = slices->counts(0);
  EXPECT_EQ(c.expiries, 0u) << "a stream waiting on a word must not hold the GPU's slice";
  EXPECT_EQ(c.switches, 1u) << "B's kernel, then A's";
}

// ACCORD_SIM_TIMESLICE_US: runtimes made from the settings (as a communicator's is) use the
// process table, which ranks forked after the parent made it share.
TEST(SimTimeSlices, TheSettingTimeSlicesProcessesForkedAfterTheProcessTable) {
  std::string why;
  auto table = sim::TimeSlices::process_table(&why);
  ASSERT_TRUE(table) << why;
  const sim::SliceCounts before = table->counts(0);
  hand_off(
      [] {
        Settings settings;
        settings.sim_topo = fixture_path(kDgx1);
        settings.sim_timeslice_us = 1000;
        settings.sim_stall_ms = 20000;
        std::unique_ptr<DeviceRuntime> rt;
        Status st = make_device_runtime(settings, &rt);
        if (!st.ok()) std::fprintf(stderr, "make_device_runtime: %s\n", st.message().c_str());
        return rt;
      },
      /*spin=*/true);
  EXPECT_GE(table->counts(0).expiries, before.expiries + 1);
}

// Kernels of one process (one CUDA context) run at once: no switch, no expiry.
TEST(SimTimeSlices, KernelsOfOneProcessShareTheSlice) {
  std::string why;
  auto slices = sim::TimeSlices::create(2, &why);
  ASSERT_TRUE(slices) << why;
  SimOptions o;
  o.timeslice_us = 1000;
  o.slices = slices;
  auto rt = make_sim(kDgx1, o);
  ASSERT_TRUE(rt);
  void* mem;
  ASSERT_OK(rt->alloc_device(0, 16, &mem));
  uint32_t zero[4] = {};
  ASSERT_OK(rt->copy(CopyKind::kHostToDevice, 0, mem, zero, 16));
  auto* words = static_cast<uint32_t*>(mem);
  Stream s1, s2;
  ASSERT_OK(rt->create_stream(0, &s1));
  ASSERT_OK(rt->create_stream(0, &s2));
  ASSERT_OK(rt->load_kernel(0, kSpin));
  ASSERT_OK(rt->load_kernel(0, kWrite));
  SpinParams sp{words, words + 1};
  ASSERT_OK(rt->launch_kernel(kSpin, &sp, sizeof sp, s1));
  WriteParams wp{words, 1};
  ASSERT_OK(rt->launch_kernel(kWrite, &wp, sizeof wp, s2));
  ASSERT_OK(rt->synchronize_stream(s1));
  ASSERT_OK(rt->synchronize_stream(s2));
  EXPECT_EQ(peek<uint32_t>(rt.get(), 0, words), 2u);
  EXPECT_EQ(rt->slice_counts(0).expiries, 0u);
  EXPECT_EQ(rt->slice_counts(0).switches, 0u);
  ASSERT_OK(rt->destroy_stream(s1));
  ASSERT_OK(rt->destroy_stream(s2));
  ASSERT_OK(rt->free_device(mem));
}

}  // namespace
}  // namespace accord::testing
