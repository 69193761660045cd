// The NCCL backend (stage 04 on the GPU): a Communicator over an NCCL communicator, for device
// memory. Made by make_nccl_communicator() from any host communicator (the MPI world, or the
// one-rank LocalCommunicator): rank 0 creates the ncclUniqueId and broadcasts it over that
// communicator, and every rank joins with ncclCommInitRank on its own GPU. docs/nccl.md tells
// the whole design; in short:
//
//   streams   every operation runs on the communicator's own stream, after the work enqueued on
//             NcclOptions::order_after so far (an event, so the host does not wait for it).
//             Blocking calls return once the operation completed; iall_reduce/isend/irecv
//             return a Request whose wait() waits for an event recorded after it.
//   p2p       isend/irecv are queued and launched together (one ncclGroupStart/End) at the next
//             wait(), test() or collective, so "send to next, receive from previous" works.
//   uneven    reduce_scatter/all_gather take the whole count (BlockPartition). Equal blocks use
//             ncclReduceScatter/ncclAllGather; uneven ones use one ncclReduce/ncclBroadcast per
//             block, rooted at the block's owner, in one group: exact, no padding, no scratch.
//   errors    waits poll ncclCommGetAsyncError and a deadline (the comm timeout); on an error
//             or past it the NCCL communicator is aborted and an Error names the rank and call.
//
// Only compiled when NCCL is found (cmake/ScalelabNccl.cmake); SCALELAB_HAVE_NCCL says so.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "comm/communicator.hpp"
#include "comm/watchdog.hpp"

namespace scalelab::cuda {

class NcclContext;

struct NcclOptions {
  // Seconds a wait may take before the NCCL communicator is aborted and an Error thrown; 0:
  // forever. Same meaning as CommOptions::timeout_seconds.
  double timeout_seconds = 300;
  // The GPU of this rank; -1: this host's local rank modulo the GPUs visible to it.
  int device = -1;
  // Work enqueued on this stream before a call is complete before the call reads its buffers
  // (pass the stream that computes them, e.g. the GPU model's). Null: the legacy default
  // stream, which the communicator's stream follows anyway.
  cudaStream_t order_after = nullptr;
  // Before every collective, all-gather (operation, count, type, root) and throw on every rank
  // if the ranks disagree: one tiny extra collective per call, so off by default; the tests and
  // anyone chasing a hang turn it on. NCCL itself would hang or silently mix data.
  bool verify_arguments = false;
  // Ends the process when a call stays blocked inside NCCL's host code (a peer that never joins)
  // for twice the timeout. Null: print the message and std::abort(); an MPI program passes a
  // function that calls MPI_Abort, to take every rank down at once.
  Watchdog::OnExpire on_hang;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclContext> context, std::shared_ptr<Watchdog> watchdog, bool verify_arguments);
  ~NcclCommunicator() override;
  const char* backend() const override { return "nccl"; }
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }
  int device() const;
  cudaStream_t stream() const;  // where the operations run

 protected:
  std::unique_ptr<RequestState> do_isend(const void* buf, std::size_t count, DataType type, int peer, int tag) override;
  std::unique_ptr<RequestState> do_irecv(void* buf, std::size_t count, DataType type, int peer, int tag) override;
  void do_all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) override;
  std::unique_ptr<RequestState> do_iall_reduce(const void* send, void* recv, std::size_t count, DataType type,
                                               ReduceOp op) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) override;
  // A unit's pieces (ZeRO on the GPU): one ncclReduce per rank's piece, rooted at its owner.
  std::unique_ptr<RequestState> do_ireduce_scatter_v(const void* send, void* recv, const Pieces& pieces, DataType type,
                                                     ReduceOp op) override;
  // A unit's pieces gathered (ZeRO-3 on the GPU): one ncclBroadcast per piece, from its owner.
  std::unique_ptr<RequestState> do_iall_gather_v(const void* send, void* recv, const Pieces& pieces,
                                                 DataType type) override;
  void do_all_gather(const void* send, void* recv, std::size_t count, DataType type) override;
  void do_broadcast(void* buf, std::size_t count, DataType type, int root) override;
  void do_barrier() override;
  std::unique_ptr<Communicator> do_split(int color, int key) override;

 private:
  // Throws an Error naming `what` unless [ptr, ptr + bytes) is memory of this rank's GPU.
  void check_device(const void* ptr, std::size_t bytes, const char* what) const;
  // Throws unless send and recv are disjoint or `in_place` (the call's in-place form, which the
  // caller judges: where the result lands differs from call to call).
  void check_overlap(const void* send, std::size_t send_bytes, const void* recv, std::size_t recv_bytes, bool in_place,
                     const char* what) const;
  // NcclOptions::verify_arguments: all ranks compare (op, count, type, root) before the call.
  void verify(CommOp op, std::size_t count, DataType type, int root, const char* what);
  void launch_all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);

  std::shared_ptr<NcclContext> ctx_;
  bool verify_arguments_;
};

// Collective over `bootstrap` (host memory: the MPI world, or a LocalCommunicator for one rank):
// every rank of it gets an NCCL communicator with the same ranks, on its own GPU. Refuses, on
// every rank with one ConfigError, two ranks on one GPU (NCCL cannot run them) and a rank with
// no GPU. The result uses its own stream; see NcclOptions for ordering and timeouts.
std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap, const NcclOptions& options = {});

}  // namespace scalelab::cuda
