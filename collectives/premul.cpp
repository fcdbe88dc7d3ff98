// Pre-multiplied sums (NCCL's ncclRedOpCreatePreMulSum; accord_red_op_create_pre_mul_sum):
// the communicator's table of such ops, and their run on host buffers. On device buffers the
// kernel scales as it reads (Note [Pre-multiplied sum], collectives/device/dev_call.hpp;
// enqueue_device); on host buffers this rank's input is scaled into a buffer of its own, then
// summed: the same result, sum over ranks of scalar_r * x_r.
#include <cstring>

#include "collectives/communicator.hpp"
#include "collectives/kernels/reduce_kernels.hpp"

namespace accord {

Status Communicator::create_premul(int dtype, const void* scalar, bool immediate, int* op) {
  if (dtype < 0 || dtype >= ACCORD_NUM_DTYPES)
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "rank %d: accord_red_op_create_pre_mul_sum: unknown dtype %d", rank_, dtype);
  if (scalar == nullptr || op == nullptr)
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "rank %d: accord_red_op_create_pre_mul_sum: op or scalar is NULL", rank_);
  PreMul pm;
  pm.live = true;
  pm.dtype = dtype;
  pm.immediate = immediate;
  if (immediate)
    std::memcpy(&pm.value, scalar, accord_dtype_size(static_cast<accord_datatype_t>(dtype)));
  else
    pm.ptr = scalar;
  std::lock_guard<std::mutex> lock(premul_mu_);
  size_t i = 0;
  while (i < premul_.size() && premul_[i].live) ++i;
  if (i >= kMaxPreMulOps)
    return error(ACCORD_ERR_INVALID_USAGE,
                 "rank %d: accord_red_op_create_pre_mul_sum: %zu ops exist already; destroy unused "
                 "ones with accord_red_op_destroy",
                 rank_, i);
  if (i == premul_.size()) premul_.emplace_back();
  premul_[i] = pm;
  *op = ACCORD_NUM_OPS + static_cast<int>(i);
  return Status::success();
}

Status Communicator::destroy_premul(int op) {
  std::lock_guard<std::mutex> lock(premul_mu_);
  const long i = static_cast<long>(op) - ACCORD_NUM_OPS;
  if (i < 0 || static_cast<size_t>(i) >= premul_.size() || !premul_[static_cast<size_t>(i)].live)
    return error(ACCORD_ERR_INVALID_ARGUMENT,
                 "rank %d: accord_red_op_destroy: op %d was not made by "
                 "accord_red_op_create_pre_mul_sum on this communicator (or was destroyed already)",
                 rank_, op);
  premul_[static_cast<size_t>(i)].live = false;
  return Status::success();
}

bool Communicator::premul_of(int op, PreMul* out) const {
  std::lock_guard<std::mutex> lock(premul_mu_);
  const long i = static_cast<long>(op) - ACCORD_NUM_OPS;
  if (i < 0 || static_cast<size_t>(i) >= premul_.size() || !premul_[static_cast<size_t>(i)].live)
    return false;
  *out = premul_[static_cast<size_t>(i)];
  return true;
}

// The scalar's bits now: by value, or read from where it lives (device memory through the
// runtime; the caller's device work that writes it must be done, as for any host-buffer call).
Status Communicator::premul_scalar(const PreMul& pm, uint64_t* bits) {
  *bits = pm.value;
  if (pm.immediate) return Status::success();
  const size_t esize = accord_dtype_size(static_cast<accord_datatype_t>(pm.dtype));
  DeviceRuntime* rt = engine_.pointer_runtime();
  PointerInfo info;
  if (rt != nullptr && rt->pointer_info(pm.ptr, &info).ok() && info.kind == MemoryKind::kDevice)
    return rt->copy(CopyKind::kDeviceToHost, info.device, bits, pm.ptr, esize)
        .prefix(format("rank %d: reading a pre-multiplied sum's scalar: ", rank_));
  std::memcpy(bits, pm.ptr, esize);
  return Status::success();
}

Status Communicator::run_premul_host(const CollArgs& a) {
  size_t in_bytes = 0, out_bytes = 0;
  ACCORD_TRY(check_args(a, &in_bytes, &out_bytes));
  PreMul pm;
  if (!premul_of(a.op, &pm))
    return error(ACCORD_ERR_INVALID_ARGUMENT, "rank %d: %s: op %d was destroyed", rank_,
                 collective_name(a.coll), a.op);
  uint64_t scalar = 0;
  ACCORD_TRY(premul_scalar(pm, &scalar));
  const auto dtype = static_cast<accord_datatype_t>(a.dtype);
  const size_t esize = accord_dtype_size(dtype), count = in_bytes / esize;
  std::vector<uint8_t> scaled(in_bytes), scalars(in_bytes);
  for (size_t i = 0; i < count; ++i) std::memcpy(scalars.data() + i * esize, &scalar, esize);
  if (count > 0) {
    kernels::ReduceArgs k;
    k.dst0 = scaled.data();
    k.a = a.send;
    k.b = scalars.data();
    k.count = count;
    kernels::get_reduce_fn(dtype, ACCORD_PROD)(k);
  }
  CollArgs b = a;
  b.op = ACCORD_SUM;
  b.send = scaled.data();
  return run_on(b, false);
}

}  // namespace accord
