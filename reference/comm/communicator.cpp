// The Communicator's public calls: argument checks, counters and the watchdog, around the
// backend's do_* hooks. Built-in collectives are counted with the bytes a ring moves per rank
// (comm/partition.hpp), the volume a bandwidth-optimal algorithm needs, since a library's own
// traffic is hidden from us.
#include "comm/communicator.hpp"

#include <chrono>
#include <exception>
#include <limits>

#include "comm/flight_recorder.hpp"
#include "core/error.hpp"

namespace scalelab {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr int kMaxTag = 32767;

// Adds one call with its bytes and time to a counter row when it goes out of scope.
class Counted {
 public:
  Counted(OpStats& row, std::size_t bytes_sent, std::size_t bytes_received) : row_(row), t0_(Clock::now()) {
    row_.calls += 1;
    row_.bytes_sent += bytes_sent;
    row_.bytes_received += bytes_received;
  }
  ~Counted() { row_.seconds += seconds_since(t0_); }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;

 private:
  OpStats& row_;
  Clock::time_point t0_;
};

}  // namespace

// A blocking call: recorded when it starts, marked complete when it returns (a call that throws
// never completed), and watched by the watchdog meanwhile.
class Communicator::Recorded {
 public:
  Recorded(Communicator& c, CommOp op, bool collective, std::size_t count, int peer)
      : c_(c), call_(c.record_begin(op, collective, count, peer)), watch_(c.slot_.get(), op, peer, call_) {}
  ~Recorded() {
    if (std::uncaught_exceptions() == exceptions_) c_.record_end(call_);
  }
  Recorded(const Recorded&) = delete;
  Recorded& operator=(const Recorded&) = delete;

 private:
  Communicator& c_;
  std::uint64_t call_;
  WatchScope watch_;
  int exceptions_ = std::uncaught_exceptions();
};

Request Communicator::begin_request(CommOp op, bool collective, std::size_t count, int peer) {
  Request request;
  request.call_ = record_begin(op, collective, count, peer);
  request.op_ = op;
  request.peer_ = peer;
  request.watch_ = slot_;
  return request;
}

void Request::complete() noexcept {
  if (const std::shared_ptr<std::uint64_t> n = in_flight_.lock()) --*n;
  in_flight_.reset();
}

void Request::drop() noexcept {
  if (!state_) return;
  const std::shared_ptr<Watchdog::Slot> slot = watch_.lock();
  {
    WatchScope watch(slot.get(), op_, peer_, call_);
    state_.reset();  // MPI: waits for the operation (frees it while an exception unwinds)
  }
  complete();
  // Complete now, as wait() would have recorded it (not while unwinding: then it was abandoned).
  if (slot && call_ != 0 && std::uncaught_exceptions() == 0) FlightRecorder::end(*slot->entry, call_);
}

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    drop();
    state_ = std::move(other.state_);
    op_ = other.op_;
    peer_ = other.peer_;
    call_ = other.call_;
    watch_ = std::move(other.watch_);
    in_flight_ = std::move(other.in_flight_);
  }
  return *this;
}

std::uint64_t Communicator::record_begin(CommOp op, bool collective, std::size_t count, int peer) {
  if (!slot_) return 0;
  return FlightRecorder::begin(*slot_->entry, name_, rank_, size_, op, collective, count, peer);
}

void Communicator::record_end(std::uint64_t call) {
  if (slot_) FlightRecorder::end(*slot_->entry, call);
}

Communicator::Communicator(int rank, int size, int world_rank, std::shared_ptr<Watchdog> watchdog)
    : rank_(rank), size_(size), world_rank_(world_rank), watchdog_(std::move(watchdog)) {
  SCALELAB_CHECK(size >= 1 && rank >= 0 && rank < size, "rank ", rank, " of ", size);
  if (watchdog_) slot_ = watchdog_->register_slot(rank, size, world_rank);
}

Communicator::~Communicator() {
  if (watchdog_) watchdog_->unregister_slot(slot_.get());
}

void Communicator::check_peer(int peer, const char* what) const {
  SCALELAB_CHECK(peer >= 0 && peer < size_, what, " on rank ", rank_, ": peer ", peer, " is not a rank of this ", size_,
                 "-rank communicator");
}

void Communicator::check_buffer(const void* buf, std::size_t count, const char* what) const {
  SCALELAB_CHECK(buf != nullptr || count == 0, what, " on rank ", rank_, ": null buffer for ", count, " elements");
}

Request Communicator::isend(const void* buf, std::size_t count, DataType type, int peer, int tag) {
  check_peer(peer, "isend");
  check_buffer(buf, count, "isend");
  SCALELAB_CHECK(tag >= 0 && tag <= kMaxTag, "isend: tag ", tag, " outside [0, ", kMaxTag, "]");
  Counted counted(stats_[CommOp::kSend], count * dtype_size(type), 0);
  Request request = begin_request(CommOp::kSend, false, count, peer);
  request.state_ = do_isend(buf, count, type, peer, tag);
  return request;
}

Request Communicator::irecv(void* buf, std::size_t count, DataType type, int peer, int tag) {
  check_peer(peer, "irecv");
  check_buffer(buf, count, "irecv");
  SCALELAB_CHECK(tag >= 0 && tag <= kMaxTag, "irecv: tag ", tag, " outside [0, ", kMaxTag, "]");
  Counted counted(stats_[CommOp::kRecv], 0, count * dtype_size(type));
  Request request = begin_request(CommOp::kRecv, false, count, peer);
  request.state_ = do_irecv(buf, count, type, peer, tag);
  if (request.state_) {  // in flight until its wait, a test that says done, or its drop
    request.in_flight_ = recvs_in_flight_;
    stats_.note_recvs_in_flight(++*recvs_in_flight_);
  }
  return request;
}

void Communicator::wait(Request& request) {
  if (!request.state_) return;
  const auto t0 = Clock::now();
  {
    WatchScope watch(slot_.get(), request.op_, request.peer_, request.call_);
    request.state_->wait();
  }
  record_end(request.call_);
  request.state_.reset();
  request.complete();
  stats_[request.op_].seconds += seconds_since(t0);
}

void Communicator::wait_all(std::span<Request> requests) {
  for (Request& r : requests) wait(r);
}

bool Communicator::test(Request& request) {
  if (!request.state_) return true;
  const auto t0 = Clock::now();
  const bool done = request.state_->test();
  if (done) {
    record_end(request.call_);
    request.state_.reset();
    request.complete();
  }
  stats_[request.op_].seconds += seconds_since(t0);
  return done;
}

void Communicator::send(const void* buf, std::size_t count, DataType type, int peer, int tag) {
  Request r = isend(buf, count, type, peer, tag);
  wait(r);
}

void Communicator::recv(void* buf, std::size_t count, DataType type, int peer, int tag) {
  Request r = irecv(buf, count, type, peer, tag);
  wait(r);
}

void Communicator::all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  check_buffer(send, count, "all_reduce");
  check_buffer(recv, count, "all_reduce");
  const RingTraffic t = ring_all_reduce_traffic(count, rank_, size_);
  const std::size_t e = dtype_size(type);
  Counted counted(stats_[CommOp::kAllReduce], t.sent * e, t.received * e);
  Recorded recorded(*this, CommOp::kAllReduce, true, count, -1);
  do_all_reduce(send, recv, count, type, op);
}

Request Communicator::iall_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  check_buffer(send, count, "iall_reduce");
  check_buffer(recv, count, "iall_reduce");
  const RingTraffic t = ring_all_reduce_traffic(count, rank_, size_);
  const std::size_t e = dtype_size(type);
  Counted counted(stats_[CommOp::kAllReduce], t.sent * e, t.received * e);
  Request request = begin_request(CommOp::kAllReduce, true, count, -1);
  request.state_ = do_iall_reduce(send, recv, count, type, op);
  return request;
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  check_buffer(send, count, "reduce_scatter");
  check_buffer(recv, partition(count).size(rank_), "reduce_scatter");
  const RingTraffic t = ring_reduce_scatter_traffic(count, rank_, size_);
  const std::size_t e = dtype_size(type);
  Counted counted(stats_[CommOp::kReduceScatter], t.sent * e, t.received * e);
  Recorded recorded(*this, CommOp::kReduceScatter, true, count, -1);
  do_reduce_scatter(send, recv, count, type, op);
}

void Communicator::all_gather(const void* send, void* recv, std::size_t count, DataType type) {
  check_buffer(send, partition(count).size(rank_), "all_gather");
  check_buffer(recv, count, "all_gather");
  const RingTraffic t = ring_all_gather_traffic(count, rank_, size_);
  const std::size_t e = dtype_size(type);
  Counted counted(stats_[CommOp::kAllGather], t.sent * e, t.received * e);
  Recorded recorded(*this, CommOp::kAllGather, true, count, -1);
  do_all_gather(send, recv, count, type);
}

Request Communicator::ireduce_scatter_v(const void* send, void* recv, const Pieces& pieces, DataType type,
                                        ReduceOp op) {
  SCALELAB_CHECK(pieces.parts() == size_, "reduce_scatter_v: ", pieces.parts(), " pieces for ", size_, " ranks");
  check_buffer(send, pieces.count(), "reduce_scatter_v");
  check_buffer(recv, pieces.size(rank_), "reduce_scatter_v");
  const RingTraffic t = ring_reduce_scatter_traffic(pieces, rank_);
  const std::size_t e = dtype_size(type);
  Counted counted(stats_[CommOp::kReduceScatter], t.sent * e, t.received * e);
  Request request = begin_request(CommOp::kReduceScatter, true, pieces.count(), -1);
  request.state_ = do_ireduce_scatter_v(send, recv, pieces, type, op);
  return request;
}

Request Communicator::iall_gather_v(const void* send, void* recv, const Pieces& pieces, DataType type) {
  SCALELAB_CHECK(pieces.parts() == size_, "all_gather_v: ", pieces.parts(), " pieces for ", size_, " ranks");
  check_buffer(send, pieces.size(rank_), "all_gather_v");
  check_buffer(recv, pieces.count(), "all_gather_v");
  const RingTraffic t = ring_all_gather_traffic(pieces, rank_);
  const std::size_t e = dtype_size(type);
  Counted counted(stats_[CommOp::kAllGather], t.sent * e, t.received * e);
  Request request = begin_request(CommOp::kAllGather, true, pieces.count(), -1);
  request.state_ = do_iall_gather_v(send, recv, pieces, type);
  return request;
}

void Communicator::reduce_scatter_v(const void* send, void* recv, const Pieces& pieces, DataType type, ReduceOp op) {
  Request r = ireduce_scatter_v(send, recv, pieces, type, op);
  wait(r);
}

void Communicator::all_gather_v(const void* send, void* recv, const Pieces& pieces, DataType type) {
  Request r = iall_gather_v(send, recv, pieces, type);
  wait(r);
}

std::unique_ptr<RequestState> Communicator::do_ireduce_scatter_v(const void*, void*, const Pieces&, DataType,
                                                                 ReduceOp) {
  throw ConfigError(std::string("zero: the '") + backend() +
                    "' communicator has no uneven reduce-scatter; ZeRO runs on the mpi backend (--device cpu)");
}

std::unique_ptr<RequestState> Communicator::do_iall_gather_v(const void*, void*, const Pieces&, DataType) {
  throw ConfigError(std::string("zero: the '") + backend() +
                    "' communicator has no uneven all-gather; ZeRO runs on the mpi backend (--device cpu)");
}

void Communicator::broadcast(void* buf, std::size_t count, DataType type, int root) {
  check_peer(root, "broadcast root");
  check_buffer(buf, count, "broadcast");
  // A pipelined chain moves S bytes into every rank but the root: busbw factor 1 (nccl-tests).
  const std::size_t bytes = size_ > 1 ? count * dtype_size(type) : 0;
  Counted counted(stats_[CommOp::kBroadcast], rank_ == root ? bytes : 0, rank_ == root ? 0 : bytes);
  Recorded recorded(*this, CommOp::kBroadcast, true, count, root);
  do_broadcast(buf, count, type, root);
}

void Communicator::barrier() {
  Counted counted(stats_[CommOp::kBarrier], 0, 0);
  Recorded recorded(*this, CommOp::kBarrier, true, 0, -1);
  do_barrier();
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  SCALELAB_CHECK(color >= 0, "split on rank ", rank_, ": color must be >= 0, got ", color);
  Counted counted(stats_[CommOp::kSplit], 0, 0);
  // Every rank of this communicator splits it as often, so the number is the same on all of
  // them; with the color it names the child alike on each of its ranks, and differently from
  // its siblings (the flight recorder matches ranks' records by this name).
  const std::string child_name = name_ + "/" + std::to_string(splits_++) + ":" + std::to_string(color);
  std::unique_ptr<Communicator> child;
  {
    Recorded recorded(*this, CommOp::kSplit, true, 0, -1);
    child = do_split(color, key);
  }
  child->name_ = child_name;
  return child;
}

}  // namespace scalelab
