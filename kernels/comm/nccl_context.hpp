// What an NCCL communicator and its in-flight requests share (stage 04 on the GPU): the
// ncclComm_t, the GPU, the stream the operations run on, the queue of point-to-point operations
// not yet launched, and the one place that waits for the GPU: with a deadline, watching NCCL's
// asynchronous error state, and aborting the communicator instead of hanging.
//
// Requests hold a shared_ptr to the context, so the ncclComm_t outlives any request that still
// refers to it. Internal to kernels/comm; users see NcclCommunicator (nccl_communicator.hpp).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/datatype.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/device_buffer.hpp"

namespace scalelab::cuda {

// One batch of point-to-point operations launched together in one ncclGroupStart/End: `done`
// is recorded on the stream after them. Until launched, `done` means nothing.
struct P2pBatch {
  Event done;
  bool launched = false;
};

class NcclContext {
 public:
  // Takes ownership of comm (a live communicator on `device`). order_after: the stream whose
  // earlier work every operation must follow (null: the legacy default stream, which the
  // context's blocking stream follows anyway). timeout_seconds <= 0: wait forever.
  NcclContext(ncclComm_t comm, int device, int world_rank, cudaStream_t order_after, double timeout_seconds);
  ~NcclContext();  // ncclCommDestroy, or ncclCommAbort if it failed or an exception is unwinding
  NcclContext(const NcclContext&) = delete;
  NcclContext& operator=(const NcclContext&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  int world_rank() const { return world_rank_; }
  double timeout_seconds() const { return timeout_seconds_; }
  cudaStream_t stream() const { return stream_.get(); }
  cudaStream_t order_after() const { return order_after_; }
  // The live communicator; throws if it was aborted (naming the operation that aborted it).
  ncclComm_t comm();
  // Makes this GPU current and the stream wait for the work enqueued on order_after so far:
  // call before enqueuing an operation that reads or writes the caller's buffers.
  void begin();
  // Makes this GPU current, nothing more: for work on the communicator's own scratch.
  void select();
  // Blocks until `event` has completed. While it waits it polls ncclCommGetAsyncError; on an
  // NCCL error or when the deadline passes it aborts the communicator and throws an Error naming
  // the rank and `what`, so the job ends instead of hanging.
  void wait_event(const Event& event, const std::string& what, std::int64_t started_ns);
  // Non-blocking: true once `event` completed; throws like wait_event on an error or a deadline
  // that passed since started_ns.
  bool test_event(const Event& event, const std::string& what, std::int64_t started_ns);
  // Records done_ on the stream and waits for it: the end of every blocking call.
  void finish(const std::string& what, std::int64_t started_ns);

  // Point to point. post() queues a send or receive in the current batch; flush() launches the
  // batch in one group. Queuing is what lets a rank post "send to next, receive from previous"
  // as two calls: launched one by one, the send kernel would block the stream until the peer
  // receives, and the peer's would do the same (a deadlock MPI does not have).
  std::shared_ptr<P2pBatch> post(bool is_send, void* buf, std::size_t count, DataType type, int peer,
                                 std::uint64_t* id);
  void flush();
  void cancel(std::uint64_t id);  // drops a queued operation (its request died while unwinding)

  // Device scratch for barrier() and the argument check: at least `count` int64 values.
  std::int64_t* scratch(std::size_t count);
  // Pinned host scratch of at least `count` int64 values: copies from and to it are truly
  // asynchronous (pageable memory may make the host wait for the stream, outside any deadline).
  std::int64_t* host_scratch(std::size_t count);

 private:
  [[noreturn]] void abort_and_throw(const std::string& what, const std::string& why);
  void check_progress(const std::string& what, std::int64_t started_ns);

  struct P2pOp {
    std::uint64_t id;
    bool is_send;
    void* buf;
    std::size_t count;
    DataType type;
    int peer;
  };

  // Makes the GPU current before the stream and events below are created on it.
  struct SelectDevice {
    explicit SelectDevice(int device);
  };

  ncclComm_t comm_ = nullptr;
  std::string aborted_by_;  // set once the communicator was aborted
  int rank_ = 0, size_ = 1, device_ = 0, world_rank_ = 0;
  cudaStream_t order_after_ = nullptr;
  double timeout_seconds_ = 0;
  SelectDevice select_;
  Stream stream_;
  Event ready_;  // recorded on order_after_ by begin()
  Event done_;   // recorded after each blocking call
  std::vector<P2pOp> pending_;
  std::shared_ptr<P2pBatch> batch_;  // the batch pending_ belongs to
  std::uint64_t next_id_ = 1;
  DeviceBuffer<std::int64_t> scratch_;
  struct FreeHost {
    void operator()(std::int64_t* p) const { cudaFreeHost(p); }
  };
  std::unique_ptr<std::int64_t[], FreeHost> host_scratch_;
  std::size_t host_scratch_count_ = 0;
};

}  // namespace scalelab::cuda
