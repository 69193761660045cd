// The host-staging communicator: pinned buffers, the copies around each wrapped call, and the
// requests that copy back when they complete.
#include "kernels/dist/host_staging_communicator.hpp"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"

namespace scalelab::cuda {

// Pinned host buffers kept for reuse: cudaMallocHost costs far more than a copy, and DDP asks for
// the same bucket sizes every step. A lease takes the smallest free buffer that fits (or a new
// one) and gives it back when it ends.
class PinnedPool {
 public:
  struct Block {
    unsigned char* ptr = nullptr;
    std::size_t bytes = 0;
  };
  PinnedPool() = default;
  ~PinnedPool() {
    for (Block& b : free_) cudaFreeHost(b.ptr);  // no throw from a destructor
  }
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  Block acquire(std::size_t bytes, StagingStats& stats) {
    if (bytes == 0) return {};
    std::size_t best = free_.size();
    for (std::size_t i = 0; i < free_.size(); ++i)
      if (free_[i].bytes >= bytes && (best == free_.size() || free_[i].bytes < free_[best].bytes)) best = i;
    if (best != free_.size()) {
      const Block b = free_[best];
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
      return b;
    }
    void* p = nullptr;
    SCALELAB_CUDA_CHECK(cudaMallocHost(&p, bytes));
    stats.pinned_bytes += bytes;
    return {static_cast<unsigned char*>(p), bytes};
  }
  void release(Block b) {
    if (b.ptr) free_.push_back(b);
  }

 private:
  std::vector<Block> free_;
};

namespace {

// One pinned buffer, returned to its pool when the lease ends.
class PinnedLease {
 public:
  PinnedLease(std::shared_ptr<PinnedPool> pool, std::size_t bytes, StagingStats& stats)
      : pool_(std::move(pool)), block_(pool_->acquire(bytes, stats)) {}
  ~PinnedLease() { pool_->release(block_); }
  PinnedLease(const PinnedLease&) = delete;
  PinnedLease& operator=(const PinnedLease&) = delete;
  unsigned char* data() const { return block_.ptr; }

 private:
  std::shared_ptr<PinnedPool> pool_;
  PinnedPool::Block block_;
};

using Clock = std::chrono::steady_clock;

}  // namespace

// A wrapped non-blocking call plus what completes it on the device: the copy of the received
// bytes from the pinned buffer back into device memory (none for a send).
class StagedRequest final : public RequestState {
 public:
  // The result, `bytes` at `host_offset` of the pinned buffer, goes to device_dst.
  StagedRequest(HostStagingCommunicator& owner, std::unique_ptr<PinnedLease> lease, void* device_dst, std::size_t bytes,
                std::size_t host_offset = 0)
      : owner_(owner), lease_(std::move(lease)), device_dst_(device_dst), bytes_(bytes), host_offset_(host_offset) {}
  // Started after construction, so that the lease outlives the wrapped request (members are
  // destroyed in reverse order: the wrapped request's destructor waits before the buffer goes).
  void start(Request inner) { inner_ = std::move(inner); }

  void wait() override {
    owner_.host_.wait(inner_);
    finish();
  }
  bool test() override {
    if (!owner_.host_.test(inner_)) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    if (device_dst_ && bytes_) owner_.to_device(device_dst_, lease_->data() + host_offset_, bytes_);
    device_dst_ = nullptr;
  }
  HostStagingCommunicator& owner_;
  std::unique_ptr<PinnedLease> lease_;
  void* device_dst_;
  std::size_t bytes_;
  std::size_t host_offset_;
  Request inner_;
};

HostStagingCommunicator::HostStagingCommunicator(Communicator& host, cudaStream_t stream)
    // No watchdog of its own: every blocking wait happens inside the wrapped communicator's
    // calls, which arm its watchdog (one slot per rank, not two).
    : Communicator(host.rank(), host.size(), host.rank(), nullptr),
      host_(host),
      stream_(stream),
      pool_(std::make_shared<PinnedPool>()) {
  require(host.memory_space() == MemorySpace::kHost, "backend",
          std::string("the host-staging communicator wraps a host-memory communicator, got '") + host.backend() + "'",
          "wrap the mpi or local communicator; a device communicator (nccl) needs no staging");
}

HostStagingCommunicator::HostStagingCommunicator(std::unique_ptr<Communicator> host, cudaStream_t stream)
    : HostStagingCommunicator(*host, stream) {
  owned_ = std::move(host);
}

HostStagingCommunicator::~HostStagingCommunicator() = default;

void HostStagingCommunicator::check_device(const void* ptr, std::size_t bytes, const char* what) const {
  if (bytes == 0) return;
  cudaPointerAttributes attr{};
  SCALELAB_CUDA_CHECK(cudaPointerGetAttributes(&attr, ptr));
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    throw Error(std::string(what) + " on rank " + std::to_string(rank()) +
                ": the host-staging communicator was given a host pointer; it takes GPU memory (pass host buffers "
                "to the communicator it wraps)");
}

void HostStagingCommunicator::to_host(void* host, const void* device, std::size_t bytes) {
  if (bytes == 0) return;
  const auto t0 = Clock::now();
  // On the producer's stream, so the copy follows every kernel enqueued before this call; the
  // synchronisation then lets the host hand the bytes to the wrapped communicator.
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_));
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  staging_.copies_to_host += 1;
  staging_.bytes_to_host += bytes;
  staging_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

void HostStagingCommunicator::to_device(void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  const auto t0 = Clock::now();
  // Synchronised so that the result is visible to every stream and the host, and the pinned
  // buffer is free for reuse, when the call (or wait()) returns.
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_));
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  staging_.copies_to_device += 1;
  staging_.bytes_to_device += bytes;
  staging_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

std::unique_ptr<RequestState> HostStagingCommunicator::do_isend(const void* buf, std::size_t count, DataType type,
                                                                int peer, int tag) {
  const std::size_t bytes = count * dtype_size(type);
  check_device(buf, bytes, "isend");
  auto lease = std::make_unique<PinnedLease>(pool_, bytes, staging_);
  to_host(lease->data(), buf, bytes);
  unsigned char* staged = lease->data();
  auto request = std::make_unique<StagedRequest>(*this, std::move(lease), nullptr, 0);
  request->start(host_.isend(staged, count, type, peer, tag));
  return request;
}

std::unique_ptr<RequestState> HostStagingCommunicator::do_irecv(void* buf, std::size_t count, DataType type, int peer,
                                                                int tag) {
  const std::size_t bytes = count * dtype_size(type);
  check_device(buf, bytes, "irecv");
  auto lease = std::make_unique<PinnedLease>(pool_, bytes, staging_);
  unsigned char* staged = lease->data();
  auto request = std::make_unique<StagedRequest>(*this, std::move(lease), buf, bytes);
  request->start(host_.irecv(staged, count, type, peer, tag));
  return request;
}

void HostStagingCommunicator::do_all_reduce(const void* send, void* recv, std::size_t count, DataType type,
                                            ReduceOp op) {
  const std::size_t bytes = count * dtype_size(type);
  check_device(send, bytes, "all_reduce");
  check_device(recv, bytes, "all_reduce");
  PinnedLease staged(pool_, bytes, staging_);
  to_host(staged.data(), send, bytes);
  host_.all_reduce(staged.data(), staged.data(), count, type, op);
  to_device(recv, staged.data(), bytes);
}

std::unique_ptr<RequestState> HostStagingCommunicator::do_iall_reduce(const void* send, void* recv, std::size_t count,
                                                                      DataType type, ReduceOp op) {
  const std::size_t bytes = count * dtype_size(type);
  check_device(send, bytes, "iall_reduce");
  check_device(recv, bytes, "iall_reduce");
  auto lease = std::make_unique<PinnedLease>(pool_, bytes, staging_);
  to_host(lease->data(), send, bytes);
  unsigned char* staged = lease->data();
  auto request = std::make_unique<StagedRequest>(*this, std::move(lease), recv, bytes);
  request->start(host_.iall_reduce(staged, staged, count, type, op));
  return request;
}

void HostStagingCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                                                ReduceOp op) {
  const std::size_t e = dtype_size(type), block = partition(count).size(rank()) * e;
  check_device(send, count * e, "reduce_scatter");
  check_device(recv, block, "reduce_scatter");
  PinnedLease whole(pool_, count * e, staging_), mine(pool_, block, staging_);
  to_host(whole.data(), send, count * e);
  host_.reduce_scatter(whole.data(), mine.data(), count, type, op);
  to_device(recv, mine.data(), block);
}

std::unique_ptr<RequestState> HostStagingCommunicator::do_ireduce_scatter_v(const void* send, void* recv,
                                                                            const Pieces& pieces, DataType type,
                                                                            ReduceOp op) {
  const std::size_t e = dtype_size(type), whole = pieces.count() * e, mine = pieces.size(rank()) * e;
  check_device(send, whole, "reduce_scatter_v");
  check_device(recv, mine, "reduce_scatter_v");
  // One pinned buffer: the unit's gradients, then this rank's piece of the sum after them.
  auto lease = std::make_unique<PinnedLease>(pool_, whole + mine, staging_);
  to_host(lease->data(), send, whole);
  unsigned char* staged = lease->data();
  auto request = std::make_unique<StagedRequest>(*this, std::move(lease), recv, mine, whole);
  request->start(host_.ireduce_scatter_v(staged, staged + whole, pieces, type, op));
  return request;
}

std::unique_ptr<RequestState> HostStagingCommunicator::do_iall_gather_v(const void* send, void* recv,
                                                                        const Pieces& pieces, DataType type) {
  const std::size_t e = dtype_size(type), whole = pieces.count() * e, mine = pieces.size(rank()) * e;
  const std::size_t offset = pieces.offset(rank()) * e;
  check_device(send, mine, "all_gather_v");
  check_device(recv, whole, "all_gather_v");
  // Staged in place: this rank's piece where it belongs in the gathered unit.
  auto lease = std::make_unique<PinnedLease>(pool_, whole, staging_);
  to_host(lease->data() + offset, send, mine);
  unsigned char* staged = lease->data();
  auto request = std::make_unique<StagedRequest>(*this, std::move(lease), recv, whole);
  request->start(host_.iall_gather_v(staged + offset, staged, pieces, type));
  return request;
}

void HostStagingCommunicator::do_all_gather(const void* send, void* recv, std::size_t count, DataType type) {
  const BlockPartition part = partition(count);
  const std::size_t e = dtype_size(type), block = part.size(rank()) * e, offset = part.offset(rank()) * e;
  check_device(send, block, "all_gather");
  check_device(recv, count * e, "all_gather");
  // Staged in place: this rank's block goes where it belongs in the gathered buffer.
  PinnedLease whole(pool_, count * e, staging_);
  to_host(whole.data() + offset, send, block);
  host_.all_gather(whole.data() + offset, whole.data(), count, type);
  to_device(recv, whole.data(), count * e);
}

void HostStagingCommunicator::do_broadcast(void* buf, std::size_t count, DataType type, int root) {
  const std::size_t bytes = count * dtype_size(type);
  check_device(buf, bytes, "broadcast");
  PinnedLease staged(pool_, bytes, staging_);
  if (rank() == root) to_host(staged.data(), buf, bytes);
  host_.broadcast(staged.data(), count, type, root);
  if (rank() != root) to_device(buf, staged.data(), bytes);
}

void HostStagingCommunicator::do_barrier() { host_.barrier(); }

std::unique_ptr<Communicator> HostStagingCommunicator::do_split(int color, int key) {
  return std::make_unique<HostStagingCommunicator>(host_.split(color, key), stream_);
}

}  // namespace scalelab::cuda
