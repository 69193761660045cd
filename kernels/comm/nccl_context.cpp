// Waiting for NCCL without hanging: every wait polls the GPU event, NCCL's asynchronous error
// state and a deadline, and ends in ncclCommAbort plus an exception when something is wrong.
#include "kernels/comm/nccl_context.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <thread>

#include "comm/watchdog.hpp"
#include "core/error.hpp"
#include "kernels/comm/nccl_check.hpp"
#include "kernels/core/cuda_check.hpp"

namespace scalelab::cuda {

NcclContext::SelectDevice::SelectDevice(int device) { SCALELAB_CUDA_CHECK(cudaSetDevice(device)); }

NcclContext::NcclContext(ncclComm_t comm, int device, int world_rank, cudaStream_t order_after, double timeout_seconds)
    : comm_(comm),
      device_(device),
      world_rank_(world_rank),
      order_after_(order_after),
      timeout_seconds_(timeout_seconds),
      select_(device),
      scratch_(0, MemCategory::kComm, nullptr) {
  SCALELAB_NCCL_CHECK(ncclCommUserRank(comm_, &rank_), world_rank_, comm_);
  SCALELAB_NCCL_CHECK(ncclCommCount(comm_, &size_), world_rank_, comm_);
}

NcclContext::~NcclContext() {
  if (!comm_) return;  // aborted already
  // While an exception unwinds, or with operations that never finished, a peer may never answer:
  // ncclCommDestroy would wait for them (forever), ncclCommAbort does not.
  cudaSetDevice(device_);
  const bool idle = cudaStreamQuery(stream_.get()) == cudaSuccess;
  if (std::uncaught_exceptions() > 0 || !idle || !pending_.empty())
    ncclCommAbort(comm_);
  else
    ncclCommDestroy(comm_);
}

ncclComm_t NcclContext::comm() {
  if (!comm_)
    throw Error(
        detail::concat("NCCL communicator on rank ", world_rank_, " is unusable: it was aborted after ", aborted_by_));
  return comm_;
}

void NcclContext::select() {
  (void)comm();  // refuse at once on an aborted communicator
  SCALELAB_CUDA_CHECK(cudaSetDevice(device_));
}

void NcclContext::begin() {
  select();
  // An event, not a stream synchronisation: the host does not wait for the producer's kernels,
  // the communication stream does (the gradients of DDP are still being computed when their
  // all-reduce is posted).
  if (order_after_ && order_after_ != stream_.get()) {
    ready_.record(order_after_);
    SCALELAB_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), ready_.get(), 0));
  }
}

void NcclContext::abort_and_throw(const std::string& what, const std::string& why) {
  if (comm_) ncclCommAbort(comm_);  // frees the GPU from the stuck kernels; the result is moot now
  comm_ = nullptr;
  aborted_by_ = what + " failed";
  pending_.clear();
  throw Error(detail::concat("rank ", world_rank_, " (rank ", rank_, " of ", size_, " in its NCCL communicator): ",
                             what, " ", why, "; the NCCL communicator was aborted, ending the job"));
}

void NcclContext::check_progress(const std::string& what, std::int64_t started_ns) {
  ncclResult_t async = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm_, &async);
  if (rc != ncclSuccess) async = rc;
  if (async != ncclSuccess && async != ncclInProgress) {
    std::string why = std::string("failed: NCCL reported ") + ncclGetErrorString(async);
    const char* last = ncclGetLastError(comm_);
    if (last && *last) why += std::string(" (") + last + ")";
    why += " (often a peer rank died; rerun with NCCL_DEBUG=INFO for NCCL's side)";
    abort_and_throw(what, why);
  }
  if (timeout_seconds_ > 0 && static_cast<double>(Watchdog::now_ns() - started_ns) * 1e-9 > timeout_seconds_) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", timeout_seconds_);
    abort_and_throw(what, std::string("did not complete within ") + seconds +
                              " s (comm timeout). A peer rank has probably died or hung, or the ranks called "
                              "different collectives");
  }
}

bool NcclContext::test_event(const Event& event, const std::string& what, std::int64_t started_ns) {
  (void)comm();
  const cudaError_t q = cudaEventQuery(event.get());
  if (q == cudaSuccess) return true;
  if (q != cudaErrorNotReady) SCALELAB_CUDA_CHECK(q);  // a failed kernel: throws
  check_progress(what, started_ns);
  return false;
}

void NcclContext::wait_event(const Event& event, const std::string& what, std::int64_t started_ns) {
  // Polling rather than cudaEventSynchronize: a synchronize on a collective whose peer never
  // arrives never returns, and then nothing could notice the deadline or NCCL's error.
  while (!test_event(event, what, started_ns)) std::this_thread::yield();
}

void NcclContext::finish(const std::string& what, std::int64_t started_ns) {
  done_.record(stream_.get());
  wait_event(done_, what, started_ns);
}

std::shared_ptr<P2pBatch> NcclContext::post(bool is_send, void* buf, std::size_t count, DataType type, int peer,
                                            std::uint64_t* id) {
  (void)comm();
  SCALELAB_CUDA_CHECK(cudaSetDevice(device_));  // the batch's event belongs to this GPU
  if (!batch_) batch_ = std::make_shared<P2pBatch>();
  *id = next_id_++;
  pending_.push_back({*id, is_send, buf, count, type, peer});
  return batch_;
}

void NcclContext::flush() {
  if (pending_.empty()) {
    if (batch_) {  // every operation of the batch was cancelled: it is complete as it is
      batch_->done.record(stream_.get());
      batch_->launched = true;
      batch_.reset();
    }
    return;
  }
  begin();
  ncclComm_t c = comm();
  SCALELAB_NCCL_CHECK(ncclGroupStart(), world_rank_, c);
  for (const P2pOp& op : pending_) {
    const ncclDataType_t t = nccl_datatype(op.type);
    if (op.is_send)
      SCALELAB_NCCL_CHECK(ncclSend(op.buf, op.count, t, op.peer, c, stream_.get()), world_rank_, c);
    else
      SCALELAB_NCCL_CHECK(ncclRecv(op.buf, op.count, t, op.peer, c, stream_.get()), world_rank_, c);
  }
  SCALELAB_NCCL_CHECK(ncclGroupEnd(), world_rank_, c);
  pending_.clear();
  batch_->done.record(stream_.get());
  batch_->launched = true;
  batch_.reset();
}

void NcclContext::cancel(std::uint64_t id) {
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [&](const P2pOp& op) { return op.id == id; }),
                 pending_.end());
}

std::int64_t* NcclContext::scratch(std::size_t count) {
  if (scratch_.size() < count) scratch_ = DeviceBuffer<std::int64_t>(count, MemCategory::kComm, nullptr);
  return scratch_.data();
}

std::int64_t* NcclContext::host_scratch(std::size_t count) {
  if (host_scratch_count_ < count) {
    void* p = nullptr;
    SCALELAB_CUDA_CHECK(cudaMallocHost(&p, count * sizeof(std::int64_t)));
    host_scratch_.reset(static_cast<std::int64_t*>(p));
    host_scratch_count_ = count;
  }
  return host_scratch_.get();
}

}  // namespace scalelab::cuda
