// accord-train: data-parallel training of LeNet-5 (or an MLP) with gradients averaged by
// Accord, or, for comparison, on one CPU as the seeds' TensorFlow recipe does. See
// trainer/README.md for the design and measured numbers, and --help for the flags.
#include <cstdio>
#include <memory>

#include "trainer/accord_sync.hpp"
#include "trainer/options.hpp"
#include "trainer/train.hpp"
#if ACCORD_TRAINER_HAVE_GPU
#include "trainer/gpu_backend.hpp"
#endif

int main(int argc, char** argv) {
  using namespace accord::trainer;
  Options options;
  if (Status s = parse_options(argc, argv, &options); !s.ok()) {
    std::fprintf(stderr, "accord-train: %s\n", s.message().c_str());
    return 2;
  }
  if (options.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  // The device first: without one, fail before joining the job or reading data.
  BackendFactory factory = cpu_backend_factory();
  if (options.device == "gpu") {
#if ACCORD_TRAINER_HAVE_GPU
    GpuDevice device;
    if (Status s = open_gpu(local_rank(), &device); !s.ok()) {
      std::fprintf(stderr, "accord-train: --device gpu: %s; use --device cpu\n", s.message().c_str());
      return 1;
    }
    factory = gpu_backend_factory(device);
#else
    std::fprintf(stderr, "accord-train: --device gpu: this accord-train was built without the GPU backend "
                 "(it needs CUDA, cuBLAS and cuDNN when meson configures the build); use --device cpu\n");
    return 1;
#endif
  }
  std::unique_ptr<GradSync> sync;
  if (Status s = create_sync(options.sync, options.overlap, &sync); !s.ok()) {
    std::fprintf(stderr, "accord-train: %s\n", s.message().c_str());
    return 1;
  }
  TrainResult result;
  if (Status s = train(options, *sync, factory, &result); !s.ok()) {
    std::fprintf(stderr, "accord-train (rank %d): %s\n", sync->rank(), s.message().c_str());
    return 1;
  }
  return 0;
}
