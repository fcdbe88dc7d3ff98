// GB/s of the host float32 sum kernel (dst0 = a + b), per ISA variant, message size (4 KiB to
// 64 MiB per buffer) and store kind (ordinary vs streaming). Bytes counted are the 3 x size a
// kernel must move (read a and b, write dst0); ordinary stores also read dst0's lines first,
// which is the traffic streaming saves. Built, not run by `meson test` (`--benchmark` runs it).
//   bench_reduce_kernels --benchmark_filter=avx2 --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/kernels/reduce_kernels.hpp"

namespace accord::kernels {
namespace {

struct Aligned {
  float* p;
  explicit Aligned(size_t bytes) : p(static_cast<float*>(std::aligned_alloc(64, bytes))) {
    memset(p, 0, bytes);  // fault the pages in before timing
  }
  ~Aligned() { std::free(p); }
};

void bm_sum(benchmark::State& state, Isa isa, bool streaming, bool dst1) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t n = bytes / sizeof(float);
  Aligned a(bytes), b(bytes), d0(bytes), d1(bytes);
  for (size_t i = 0; i < n; ++i) {
    a.p[i] = static_cast<float>(i & 1023);
    b.p[i] = 1.0f;
  }
  ReduceArgs args;
  args.a = a.p;
  args.b = b.p;
  args.dst0 = d0.p;
  args.dst1 = dst1 ? d1.p : nullptr;
  args.count = n;
  args.dst0_streaming = streaming;
  const ReduceFn fn = get_reduce_fn(ACCORD_FLOAT32, ACCORD_SUM, isa);
  for (auto _ : state) {
    fn(args);
    benchmark::DoNotOptimize(d0.p);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes * (dst1 ? 4 : 3));
}

void bm_copy(benchmark::State& state, Isa isa, bool streaming) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  Aligned a(bytes), d(bytes);
  for (auto _ : state) {
    copy(d.p, a.p, bytes, streaming, isa);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes * 2);
}

void register_all() {
  for (int i = 0; i < kNumIsas; ++i) {
    const Isa isa = static_cast<Isa>(i);
    if (!isa_available(isa)) continue;
    for (const bool streaming : {false, true}) {
      const std::string kind = streaming ? "stream" : "plain";
      const std::string sum = std::string("f32_sum/") + isa_name(isa) + "/" + kind;
      benchmark::RegisterBenchmark(sum.c_str(), bm_sum, isa, streaming, false)
          ->Arg(4 << 10)
          ->Arg(256 << 10)
          ->Arg(4 << 20)
          ->Arg(64 << 20)
          ->UseRealTime();
      const std::string two = std::string("f32_sum_dst1/") + isa_name(isa) + "/" + kind;
      benchmark::RegisterBenchmark(two.c_str(), bm_sum, isa, streaming, true)
          ->Arg(256 << 10)
          ->Arg(64 << 20)
          ->UseRealTime();
      const std::string cp = std::string("copy/") + isa_name(isa) + "/" + kind;
      benchmark::RegisterBenchmark(cp.c_str(), bm_copy, isa, streaming)
          ->Arg(4 << 20)
          ->Arg(64 << 20)
          ->UseRealTime();
    }
  }
}

}  // namespace
}  // namespace accord::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  accord::kernels::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
