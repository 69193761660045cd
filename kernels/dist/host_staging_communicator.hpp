// A device-memory communicator made of a host-memory one (stage 04 on the GPU): the fallback
// where NCCL cannot run, e.g. several processes sharing one GPU (NCCL refuses two ranks on one
// device). Every call copies the device buffers into pinned host buffers, runs the wrapped
// communicator's (MPI's or the local one's) call on those, and copies the result back:
//
//   device --D2H on `stream`, synchronise--> pinned host --wrapped collective--> pinned host
//          --H2D on `stream`, synchronise--> device
//
// Ordering. The copies to the host are enqueued on `stream` (pass the stream that computes the
// buffers: the GPU model's) and then synchronised, so they read what every kernel enqueued
// before the call wrote, and the host starts the wrapped call only after that. Non-blocking
// calls (isend, irecv, iall_reduce) stage in the same way when posted; their Request copies the
// result back in wait() (or in test() once it reports completion), and after wait() the device
// buffer holds the result for any stream and for the host. A pinned buffer stays leased to its
// request until then; buffers are reused across calls, so a training step allocates nothing
// after the first.
//
// Counting. The public calls count themselves in this communicator's stats() exactly as every
// backend does (the ring volume per rank), so a DDP step reports the same bytes over NCCL or over
// this adapter. The wrapped communicator counts the same wire bytes again in its own stats(),
// since it made the transfers: read one or the other, never add them. What staging adds, the PCIe
// copies, is not wire traffic; it is counted apart in staging_stats().
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/communicator.hpp"

namespace scalelab::cuda {

// Host <-> device copies made by a HostStagingCommunicator.
struct StagingStats {
  std::uint64_t copies_to_host = 0, copies_to_device = 0;
  std::uint64_t bytes_to_host = 0, bytes_to_device = 0;
  double seconds = 0;  // host time spent in the copies, synchronisation included
  // Pinned host memory held for staging. Not counted by a MemoryTracker: the tracker counts
  // device memory and is cross-checked against the device's pool (kernels/core/device_memory.hpp).
  std::size_t pinned_bytes = 0;
};

class PinnedPool;  // reusable pinned host buffers (host_staging_communicator.cpp)

class HostStagingCommunicator final : public Communicator {
 public:
  // Wraps `host` (memory_space() kHost; it must outlive this). Copies run on `stream`.
  HostStagingCommunicator(Communicator& host, cudaStream_t stream);
  // The same, owning the wrapped communicator (split() returns these).
  HostStagingCommunicator(std::unique_ptr<Communicator> host, cudaStream_t stream);
  ~HostStagingCommunicator() override;

  const char* backend() const override { return "host-staging"; }
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }
  Communicator& wrapped() { return host_; }
  const StagingStats& staging_stats() const { return staging_; }

 protected:
  std::unique_ptr<RequestState> do_isend(const void* buf, std::size_t count, DataType type, int peer, int tag) override;
  std::unique_ptr<RequestState> do_irecv(void* buf, std::size_t count, DataType type, int peer, int tag) override;
  void do_all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) override;
  std::unique_ptr<RequestState> do_iall_reduce(const void* send, void* recv, std::size_t count, DataType type,
                                               ReduceOp op) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) override;
  // ZeRO on the GPU (stage 07): one unit's pieces, reduced as backward finishes the unit.
  std::unique_ptr<RequestState> do_ireduce_scatter_v(const void* send, void* recv, const Pieces& pieces, DataType type,
                                                     ReduceOp op) override;
  // ZeRO-3 on the GPU: one unit's parameters gathered from their owners.
  std::unique_ptr<RequestState> do_iall_gather_v(const void* send, void* recv, const Pieces& pieces,
                                                 DataType type) override;
  void do_all_gather(const void* send, void* recv, std::size_t count, DataType type) override;
  void do_broadcast(void* buf, std::size_t count, DataType type, int root) override;
  void do_barrier() override;
  std::unique_ptr<Communicator> do_split(int color, int key) override;

 private:
  friend class StagedRequest;
  // Checks that ptr is device memory (a host pointer here is a caller's mistake that would
  // otherwise surface as an unrelated CUDA error).
  void check_device(const void* ptr, std::size_t bytes, const char* what) const;
  void to_host(void* host, const void* device, std::size_t bytes);
  void to_device(void* device, const void* host, std::size_t bytes);

  std::unique_ptr<Communicator> owned_;  // set by the owning constructor
  Communicator& host_;
  cudaStream_t stream_;
  std::shared_ptr<PinnedPool> pool_;  // shared with in-flight requests
  StagingStats staging_;
};

}  // namespace scalelab::cuda
