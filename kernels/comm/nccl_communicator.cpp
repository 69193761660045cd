// The NCCL backend's calls: argument checks that NCCL itself does not make (device memory,
// overlapping buffers, optionally agreement across ranks), then one NCCL call or group on the
// communicator's stream, then a wait that cannot hang (NcclContext::wait_event).
#include "kernels/comm/nccl_communicator.hpp"

#include <cstdio>
#include <exception>
#include <string>

#include "core/error.hpp"
#include "kernels/comm/nccl_check.hpp"
#include "kernels/comm/nccl_context.hpp"
#include "kernels/core/cuda_check.hpp"

namespace scalelab::cuda {

namespace {

std::int64_t now_ns() { return Watchdog::now_ns(); }

const char* at(const void* base, std::size_t elements, std::size_t elem) {
  return static_cast<const char*>(base) + elements * elem;
}

// iall_reduce's request: complete when the event recorded after the all-reduce has completed.
class NcclEventRequest final : public RequestState {
 public:
  NcclEventRequest(std::shared_ptr<NcclContext> ctx, std::string what)
      : ctx_(std::move(ctx)), what_(std::move(what)), started_ns_(now_ns()) {
    done_.record(ctx_->stream());
  }
  ~NcclEventRequest() override {
    // Never waited on: wait, so the buffers stay untouched once their owner frees them. While an
    // exception unwinds the job is ending; waiting could hang, so leave it to the abort.
    if (complete_ || std::uncaught_exceptions() > 0) return;
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "scalelab: %s\n", e.what());
    }
  }
  void wait() override {
    ctx_->wait_event(done_, what_, started_ns_);
    complete_ = true;
  }
  bool test() override { return complete_ = ctx_->test_event(done_, what_, started_ns_); }

 private:
  std::shared_ptr<NcclContext> ctx_;
  std::string what_;
  std::int64_t started_ns_;
  Event done_;
  bool complete_ = false;
};

// isend/irecv's request: launches its batch on first wait() or test(), then waits like the above.
class NcclP2pRequest final : public RequestState {
 public:
  NcclP2pRequest(std::shared_ptr<NcclContext> ctx, std::shared_ptr<P2pBatch> batch, std::uint64_t id, std::string what)
      : ctx_(std::move(ctx)), batch_(std::move(batch)), id_(id), what_(std::move(what)), started_ns_(now_ns()) {}
  ~NcclP2pRequest() override {
    if (complete_) return;
    if (std::uncaught_exceptions() > 0) {
      if (!batch_->launched) ctx_->cancel(id_);  // never launch it once its buffer may be gone
      return;
    }
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "scalelab: %s\n", e.what());
    }
  }
  void wait() override {
    if (!batch_->launched) ctx_->flush();
    ctx_->wait_event(batch_->done, what_, started_ns_);
    complete_ = true;
  }
  bool test() override {
    if (!batch_->launched) ctx_->flush();
    return complete_ = ctx_->test_event(batch_->done, what_, started_ns_);
  }

 private:
  std::shared_ptr<NcclContext> ctx_;
  std::shared_ptr<P2pBatch> batch_;
  std::uint64_t id_;
  std::string what_;
  std::int64_t started_ns_;
  bool complete_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(std::shared_ptr<NcclContext> context, std::shared_ptr<Watchdog> watchdog,
                                   bool verify_arguments)
    : Communicator(context->rank(), context->size(), context->world_rank(), std::move(watchdog)),
      ctx_(std::move(context)),
      verify_arguments_(verify_arguments) {
  ctx_->scratch(4 * static_cast<std::size_t>(size()));  // barrier and verify: no allocation per call
}

NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::device() const { return ctx_->device(); }
cudaStream_t NcclCommunicator::stream() const { return ctx_->stream(); }

void NcclCommunicator::check_device(const void* ptr, std::size_t bytes, const char* what) const {
  if (bytes == 0) return;
  cudaPointerAttributes attr{};
  SCALELAB_CUDA_CHECK(cudaPointerGetAttributes(&attr, ptr));
  if (attr.type == cudaMemoryTypeManaged) return;
  if (attr.type != cudaMemoryTypeDevice)
    throw Error(detail::concat(what, " on rank ", rank(),
                               ": the NCCL communicator was given a host pointer; it takes GPU memory (cudaMalloc). "
                               "Pass host buffers to the MPI communicator, or copy them to the GPU first"));
  if (attr.device != ctx_->device())
    throw Error(detail::concat(what, " on rank ", rank(), ": the buffer is on GPU ", attr.device,
                               ", but this rank's NCCL communicator uses GPU ", ctx_->device(),
                               "; allocate it after selecting that GPU (cudaSetDevice)"));
}

void NcclCommunicator::check_overlap(const void* send, std::size_t send_bytes, const void* recv, std::size_t recv_bytes,
                                     bool in_place, const char* what) const {
  if (send_bytes == 0 || recv_bytes == 0 || in_place) return;
  const char* s = static_cast<const char*>(send);
  const char* r = static_cast<const char*>(recv);
  const bool disjoint = s + send_bytes <= r || r + recv_bytes <= s;
  SCALELAB_CHECK(disjoint, what, " on rank ", rank(),
                 ": the send and receive buffers overlap without being the in-place form "
                 "(comm/communicator.hpp: all_reduce send == recv; reduce_scatter recv == send + offset(rank); "
                 "all_gather send == recv + offset(rank)); use disjoint buffers or the in-place form");
}

void NcclCommunicator::verify(CommOp op, std::size_t count, DataType type, int root, const char* what) {
  if (!verify_arguments_) return;
  const int n = size();
  const std::int64_t started = now_ns();
  const std::size_t cells = 4 * static_cast<std::size_t>(n);
  std::int64_t* table = ctx_->scratch(cells);
  std::int64_t* all = ctx_->host_scratch(cells);  // the previous check's copies have completed
  std::int64_t* mine = all + 4 * rank();
  mine[0] = static_cast<std::int64_t>(op);
  mine[1] = static_cast<std::int64_t>(count);
  mine[2] = static_cast<std::int64_t>(type);
  mine[3] = root;
  // Not begin(): the check reads no caller buffer, so it need not wait for order_after's kernels,
  // and iall_reduce stays non-blocking while they run.
  ctx_->select();
  const std::size_t row = 4 * sizeof(std::int64_t);
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(table + 4 * rank(), mine, row, cudaMemcpyHostToDevice, ctx_->stream()));
  SCALELAB_NCCL_CHECK(ncclAllGather(table + 4 * rank(), table, 4, ncclInt64, ctx_->comm(), ctx_->stream()),
                      world_rank(), ctx_->comm());
  SCALELAB_CUDA_CHECK(
      cudaMemcpyAsync(all, table, cells * sizeof(std::int64_t), cudaMemcpyDeviceToHost, ctx_->stream()));
  ctx_->finish(std::string(what) + " (argument check)", started);
  // Every rank sees the same table, so every rank throws the same message.
  for (int r = 1; r < n; ++r) {
    const std::int64_t* a = all;
    const std::int64_t* b = all + 4 * r;
    if (a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3]) continue;
    const auto describe = [](const std::int64_t* v) {
      return detail::concat(comm_op_name(static_cast<CommOp>(v[0])), "(count ", v[1], ", ",
                            dtype_name(static_cast<DataType>(v[2])), v[3] >= 0 ? ", root " : "",
                            v[3] >= 0 ? std::to_string(v[3]) : std::string(), ")");
    };
    throw Error(detail::concat(what, " on rank ", rank(), ": the ranks disagree: rank 0 called ", describe(a),
                               ", rank ", r, " called ", describe(b),
                               "; every rank must make the same collective call with the same count, type and root"));
  }
}

std::unique_ptr<RequestState> NcclCommunicator::do_isend(const void* buf, std::size_t count, DataType type, int peer,
                                                         int /*tag: NCCL has none; order is kept*/) {
  check_device(buf, count * dtype_size(type), "isend");
  std::uint64_t id = 0;
  auto batch = ctx_->post(true, const_cast<void*>(buf), count, type, peer, &id);
  return std::make_unique<NcclP2pRequest>(ctx_, std::move(batch), id, "send to rank " + std::to_string(peer));
}

std::unique_ptr<RequestState> NcclCommunicator::do_irecv(void* buf, std::size_t count, DataType type, int peer,
                                                         int /*tag*/) {
  check_device(buf, count * dtype_size(type), "irecv");
  std::uint64_t id = 0;
  auto batch = ctx_->post(false, buf, count, type, peer, &id);
  return std::make_unique<NcclP2pRequest>(ctx_, std::move(batch), id, "recv from rank " + std::to_string(peer));
}

void NcclCommunicator::launch_all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  const std::size_t bytes = count * dtype_size(type);
  check_device(send, bytes, "all_reduce");
  check_device(recv, bytes, "all_reduce");
  check_overlap(send, bytes, recv, bytes, send == recv, "all_reduce");
  ctx_->flush();  // queued sends and receives go first, in the order they were posted
  verify(CommOp::kAllReduce, count, type, -1, "all_reduce");
  ctx_->begin();
  if (count == 0) return;
  SCALELAB_NCCL_CHECK(ncclAllReduce(send, recv, count, nccl_datatype(type), nccl_op(op), ctx_->comm(), ctx_->stream()),
                      world_rank(), ctx_->comm());
}

void NcclCommunicator::do_all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  const std::int64_t started = now_ns();
  launch_all_reduce(send, recv, count, type, op);
  ctx_->finish("all_reduce of " + std::to_string(count) + " elements", started);
}

std::unique_ptr<RequestState> NcclCommunicator::do_iall_reduce(const void* send, void* recv, std::size_t count,
                                                               DataType type, ReduceOp op) {
  launch_all_reduce(send, recv, count, type, op);
  return std::make_unique<NcclEventRequest>(ctx_, "iall_reduce of " + std::to_string(count) + " elements");
}

void NcclCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  const std::int64_t started = now_ns();
  const BlockPartition p = partition(count);
  const std::size_t e = dtype_size(type);
  const int me = rank();
  check_device(send, count * e, "reduce_scatter");
  check_device(recv, p.size(me) * e, "reduce_scatter");
  check_overlap(send, count * e, recv, p.size(me) * e, recv == at(send, p.offset(me), e), "reduce_scatter");
  ctx_->flush();
  verify(CommOp::kReduceScatter, count, type, -1, "reduce_scatter");
  if (count == 0) return;
  ctx_->begin();
  ncclComm_t c = ctx_->comm();
  const ncclDataType_t t = nccl_datatype(type);
  if (count % static_cast<std::size_t>(size()) == 0) {
    // Equal blocks: NCCL's own reduce-scatter; its in-place form is ours (recv == send + r * block).
    SCALELAB_NCCL_CHECK(ncclReduceScatter(send, recv, p.size(me), t, nccl_op(op), c, ctx_->stream()), world_rank(), c);
  } else {
    // Uneven blocks: block b is a reduce rooted at its owner b. In one group NCCL runs them all
    // at once. A non-root's receive buffer is unused; it gets a valid pointer all the same.
    SCALELAB_NCCL_CHECK(ncclGroupStart(), world_rank(), c);
    for (int b = 0; b < size(); ++b) {
      if (p.size(b) == 0) continue;  // every rank skips the same blocks
      const void* block = at(send, p.offset(b), e);
      void* out = b == me ? recv : const_cast<void*>(block);
      SCALELAB_NCCL_CHECK(ncclReduce(block, out, p.size(b), t, nccl_op(op), b, c, ctx_->stream()), world_rank(), c);
    }
    SCALELAB_NCCL_CHECK(ncclGroupEnd(), world_rank(), c);
  }
  ctx_->finish("reduce_scatter of " + std::to_string(count) + " elements", started);
}

std::unique_ptr<RequestState> NcclCommunicator::do_ireduce_scatter_v(const void* send, void* recv, const Pieces& pieces,
                                                                     DataType type, ReduceOp op) {
  const std::size_t e = dtype_size(type);
  const int me = rank();
  check_device(send, pieces.count() * e, "reduce_scatter_v");
  check_device(recv, pieces.size(me) * e, "reduce_scatter_v");
  ctx_->flush();
  verify(CommOp::kReduceScatter, pieces.count(), type, -1, "reduce_scatter_v");
  ctx_->begin();
  if (pieces.count() > 0) {
    // Piece b is a reduce rooted at its owner b, all in one group (as the uneven reduce_scatter).
    ncclComm_t c = ctx_->comm();
    SCALELAB_NCCL_CHECK(ncclGroupStart(), world_rank(), c);
    for (int b = 0; b < size(); ++b) {
      if (pieces.size(b) == 0) continue;  // every rank skips the same pieces
      const void* piece = at(send, pieces.offset(b), e);
      void* out = b == me ? recv : const_cast<void*>(piece);
      SCALELAB_NCCL_CHECK(ncclReduce(piece, out, pieces.size(b), nccl_datatype(type), nccl_op(op), b, c,
                                     ctx_->stream()),
                          world_rank(), c);
    }
    SCALELAB_NCCL_CHECK(ncclGroupEnd(), world_rank(), c);
  }
  return std::make_unique<NcclEventRequest>(ctx_,
                                            "ireduce_scatter_v of " + std::to_string(pieces.count()) + " elements");
}

std::unique_ptr<RequestState> NcclCommunicator::do_iall_gather_v(const void* send, void* recv, const Pieces& pieces,
                                                                 DataType type) {
  const std::size_t e = dtype_size(type);
  const int me = rank();
  check_device(send, pieces.size(me) * e, "all_gather_v");
  check_device(recv, pieces.count() * e, "all_gather_v");
  ctx_->flush();
  verify(CommOp::kAllGather, pieces.count(), type, -1, "all_gather_v");
  ctx_->begin();
  if (pieces.count() > 0) {
    // Piece b is a broadcast from its owner b into its place in recv, all in one group.
    ncclComm_t c = ctx_->comm();
    SCALELAB_NCCL_CHECK(ncclGroupStart(), world_rank(), c);
    for (int b = 0; b < size(); ++b) {
      if (pieces.size(b) == 0) continue;
      void* place = const_cast<char*>(at(recv, pieces.offset(b), e));
      const void* from = b == me ? send : place;
      SCALELAB_NCCL_CHECK(ncclBroadcast(from, place, pieces.size(b), nccl_datatype(type), b, c, ctx_->stream()),
                          world_rank(), c);
    }
    SCALELAB_NCCL_CHECK(ncclGroupEnd(), world_rank(), c);
  }
  return std::make_unique<NcclEventRequest>(ctx_, "iall_gather_v of " + std::to_string(pieces.count()) + " elements");
}

void NcclCommunicator::do_all_gather(const void* send, void* recv, std::size_t count, DataType type) {
  const std::int64_t started = now_ns();
  const BlockPartition p = partition(count);
  const std::size_t e = dtype_size(type);
  const int me = rank();
  check_device(send, p.size(me) * e, "all_gather");
  check_device(recv, count * e, "all_gather");
  check_overlap(send, p.size(me) * e, recv, count * e, send == at(recv, p.offset(me), e), "all_gather");
  ctx_->flush();
  verify(CommOp::kAllGather, count, type, -1, "all_gather");
  if (count == 0) return;
  ctx_->begin();
  ncclComm_t c = ctx_->comm();
  const ncclDataType_t t = nccl_datatype(type);
  if (count % static_cast<std::size_t>(size()) == 0) {
    // Equal blocks: NCCL's own all-gather; its in-place form is ours (send == recv + r * block).
    SCALELAB_NCCL_CHECK(ncclAllGather(send, recv, p.size(me), t, c, ctx_->stream()), world_rank(), c);
  } else {
    // Uneven blocks: block b is a broadcast from its owner b into its place in recv, all in one
    // group. A non-root's send buffer is unused; it gets its own block's place.
    SCALELAB_NCCL_CHECK(ncclGroupStart(), world_rank(), c);
    for (int b = 0; b < size(); ++b) {
      if (p.size(b) == 0) continue;
      void* place = const_cast<char*>(at(recv, p.offset(b), e));
      const void* from = b == me ? send : place;
      SCALELAB_NCCL_CHECK(ncclBroadcast(from, place, p.size(b), t, b, c, ctx_->stream()), world_rank(), c);
    }
    SCALELAB_NCCL_CHECK(ncclGroupEnd(), world_rank(), c);
  }
  ctx_->finish("all_gather of " + std::to_string(count) + " elements", started);
}

void NcclCommunicator::do_broadcast(void* buf, std::size_t count, DataType type, int root) {
  const std::int64_t started = now_ns();
  check_device(buf, count * dtype_size(type), "broadcast");
  ctx_->flush();
  verify(CommOp::kBroadcast, count, type, root, "broadcast");
  if (count == 0) return;
  ctx_->begin();
  SCALELAB_NCCL_CHECK(ncclBroadcast(buf, buf, count, nccl_datatype(type), root, ctx_->comm(), ctx_->stream()),
                      world_rank(), ctx_->comm());
  ctx_->finish("broadcast from root " + std::to_string(root), started);
}

void NcclCommunicator::do_barrier() {
  // NCCL has no barrier: an all-reduce of one value reaches every rank only after all joined,
  // and waiting for it on the host makes it a barrier for the host as well.
  const std::int64_t started = now_ns();
  ctx_->flush();
  std::int64_t* one = ctx_->scratch(1);
  ctx_->select();
  SCALELAB_NCCL_CHECK(ncclAllReduce(one, one, 1, ncclInt64, ncclSum, ctx_->comm(), ctx_->stream()), world_rank(),
                      ctx_->comm());
  ctx_->finish("barrier", started);
}

std::unique_ptr<Communicator> NcclCommunicator::do_split(int color, int key) {
  ctx_->flush();
  ctx_->begin();
  ncclComm_t sub = nullptr;
  // Collective and blocking, like MPI_Comm_split; the child inherits this communicator's config.
  SCALELAB_NCCL_CHECK(ncclCommSplit(ctx_->comm(), color, key, &sub, nullptr), world_rank(), ctx_->comm());
  SCALELAB_CHECK(sub != nullptr, "ncclCommSplit with color ", color, " returned no communicator on rank ", rank());
  auto child = std::make_shared<NcclContext>(sub, ctx_->device(), world_rank(), ctx_->order_after(),
                                             ctx_->timeout_seconds());
  return std::make_unique<NcclCommunicator>(std::move(child), watchdog(), verify_arguments_);
}

}  // namespace scalelab::cuda
