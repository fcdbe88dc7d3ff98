// Accord C++ layer: header-only RAII over the C API in accord.h.
//
//   accord::Comm comm = accord::Comm::from_env();
//   std::vector<float> grads(n);
//   comm.all_reduce(std::span(grads), accord::Op::kAvg);   // in place
//
// Errors are thrown as accord::Error (status code + the communicator's message) in the caller's
// code; nothing throws across the C ABI.
#ifndef ACCORD_ACCORD_HPP_
#define ACCORD_ACCORD_HPP_

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "accord.h"

namespace accord {

class Error : public std::runtime_error {
 public:
  Error(accord_status_t status, const std::string& message)
      : std::runtime_error(std::string(accord_status_string(status)) + ": " + message),
        status_(status) {}
  accord_status_t status() const noexcept { return status_; }

 private:
  accord_status_t status_;
};

enum class Op { kSum = ACCORD_SUM, kProd = ACCORD_PROD, kMax = ACCORD_MAX, kMin = ACCORD_MIN, kAvg = ACCORD_AVG };

// Maps C++ element types to accord_datatype_t. float16/bfloat16 buffers: use the raw overloads
// with ACCORD_FLOAT16 / ACCORD_BFLOAT16.
template <typename T> struct DtypeOf;
template <> struct DtypeOf<int8_t> { static constexpr accord_datatype_t value = ACCORD_INT8; };
template <> struct DtypeOf<uint8_t> { static constexpr accord_datatype_t value = ACCORD_UINT8; };
template <> struct DtypeOf<int32_t> { static constexpr accord_datatype_t value = ACCORD_INT32; };
template <> struct DtypeOf<uint32_t> { static constexpr accord_datatype_t value = ACCORD_UINT32; };
template <> struct DtypeOf<int64_t> { static constexpr accord_datatype_t value = ACCORD_INT64; };
template <> struct DtypeOf<uint64_t> { static constexpr accord_datatype_t value = ACCORD_UINT64; };
template <> struct DtypeOf<float> { static constexpr accord_datatype_t value = ACCORD_FLOAT32; };
template <> struct DtypeOf<double> { static constexpr accord_datatype_t value = ACCORD_FLOAT64; };

class UniqueId {
 public:
  static UniqueId create() {
    UniqueId id;
    check(accord_get_unique_id(&id.raw_), nullptr);
    return id;
  }
  const accord_unique_id_t& raw() const noexcept { return raw_; }
  accord_unique_id_t& raw() noexcept { return raw_; }

 private:
  accord_unique_id_t raw_{};

  static void check(accord_status_t s, accord_comm_t comm) {
    if (s != ACCORD_SUCCESS) throw Error(s, accord_last_error(comm));
  }
};

class Comm {
 public:
  Comm() = default;
  // Takes ownership of a communicator made with the C API.
  explicit Comm(accord_comm_t raw) noexcept : comm_(raw) {}

  static Comm from_env() {
    accord_comm_t c = nullptr;
    check(accord_comm_init_from_env(&c), nullptr);
    return Comm(c);
  }
  static Comm init_rank(int nranks, const UniqueId& id, int rank) {
    accord_comm_t c = nullptr;
    check(accord_comm_init_rank(&c, nranks, id.raw(), rank), nullptr);
    return Comm(c);
  }

  Comm(Comm&& o) noexcept : comm_(std::exchange(o.comm_, nullptr)) {}
  Comm& operator=(Comm&& o) noexcept {
    if (this != &o) {
      reset();
      comm_ = std::exchange(o.comm_, nullptr);
    }
    return *this;
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm() { reset(); }

  void reset() noexcept {
    if (comm_ != nullptr) (void)accord_comm_destroy(comm_);
    comm_ = nullptr;
  }
  accord_comm_t get() const noexcept { return comm_; }
  explicit operator bool() const noexcept { return comm_ != nullptr; }

  int rank() const {
    int r = -1;
    check(accord_comm_rank(comm_, &r), comm_);
    return r;
  }
  int size() const {
    int n = 0;
    check(accord_comm_count(comm_, &n), comm_);
    return n;
  }

  // Raw overloads: any dtype, host buffers or (with a stream) device buffers.
  void all_reduce(const void* send, void* recv, size_t count, accord_datatype_t dtype, Op op,
                  accord_stream_t stream = nullptr) {
    check(accord_all_reduce(send, recv, count, dtype, static_cast<accord_red_op_t>(op), comm_, stream), comm_);
  }
  void broadcast(const void* send, void* recv, size_t count, accord_datatype_t dtype, int root,
                 accord_stream_t stream = nullptr) {
    check(accord_broadcast(send, recv, count, dtype, root, comm_, stream), comm_);
  }
  void barrier() { check(accord_barrier(comm_, nullptr), comm_); }

  // std::span overloads (host memory).
  template <typename T>
  void all_reduce(std::span<const T> send, std::span<T> recv, Op op = Op::kSum) {
    if (send.size() != recv.size())
      throw Error(ACCORD_ERR_INVALID_ARGUMENT, "all_reduce: send and recv spans differ in size");
    all_reduce(send.data(), recv.data(), send.size(), DtypeOf<std::remove_cv_t<T>>::value, op);
  }
  template <typename T>
  void all_reduce(std::span<T> inout, Op op = Op::kSum) {
    all_reduce(inout.data(), inout.data(), inout.size(), DtypeOf<T>::value, op);
  }
  template <typename T>
  void broadcast(std::span<T> inout, int root) {
    broadcast(inout.data(), inout.data(), inout.size(), DtypeOf<T>::value, root);
  }
  template <typename T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv, Op op = Op::kSum) {
    if (send.size() != recv.size() * static_cast<size_t>(size()))
      throw Error(ACCORD_ERR_INVALID_ARGUMENT, "reduce_scatter: send must hold size() * recv.size() elements");
    check(accord_reduce_scatter(send.data(), recv.data(), recv.size(), DtypeOf<std::remove_cv_t<T>>::value,
                                static_cast<accord_red_op_t>(op), comm_, nullptr),
          comm_);
  }
  template <typename T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    if (recv.size() != send.size() * static_cast<size_t>(size()))
      throw Error(ACCORD_ERR_INVALID_ARGUMENT, "all_gather: recv must hold size() * send.size() elements");
    check(accord_all_gather(send.data(), recv.data(), send.size(), DtypeOf<std::remove_cv_t<T>>::value, comm_,
                            nullptr),
          comm_);
  }
  // Point-to-point (host memory); several of them progress together between
  // accord_group_start and accord_group_end.
  template <typename T>
  void send(std::span<const T> data, int peer) {
    check(accord_send(data.data(), data.size(), DtypeOf<std::remove_cv_t<T>>::value, peer, comm_, nullptr), comm_);
  }
  template <typename T>
  void recv(std::span<T> data, int peer) {
    check(accord_recv(data.data(), data.size(), DtypeOf<T>::value, peer, comm_, nullptr), comm_);
  }
  template <typename T>
  void reduce(std::span<const T> send, std::span<T> recv, int root, Op op = Op::kSum) {
    check(accord_reduce(send.data(), recv.data(), send.size(), DtypeOf<std::remove_cv_t<T>>::value,
                        static_cast<accord_red_op_t>(op), root, comm_, nullptr),
          comm_);
  }

 private:
  accord_comm_t comm_ = nullptr;

  static void check(accord_status_t s, accord_comm_t comm) {
    if (s != ACCORD_SUCCESS) throw Error(s, accord_last_error(comm));
  }
};

}  // namespace accord

#endif  // ACCORD_ACCORD_HPP_
