// The one-rank communicator: collectives are copies; self-messages are matched by tag in order.
#include "comm/local_communicator.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace scalelab {

struct LocalCommunicator::PendingRecv {
  void* buf = nullptr;
  std::size_t capacity = 0;  // bytes
  int tag = 0;
  bool done = false;
};

namespace {

class DoneState final : public RequestState {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class RecvState final : public RequestState {
 public:
  explicit RecvState(std::shared_ptr<LocalCommunicator::PendingRecv> p) : pending_(std::move(p)) {}
  void wait() override {
    SCALELAB_CHECK(pending_->done, "recv from rank 0 with tag ", pending_->tag,
                   " on the one-rank communicator has no matching send, so it would block forever");
  }
  bool test() override { return pending_->done; }

 private:
  std::shared_ptr<LocalCommunicator::PendingRecv> pending_;
};

void deliver(LocalCommunicator::PendingRecv& r, const void* data, std::size_t bytes) {
  SCALELAB_CHECK(bytes <= r.capacity, "message of ", bytes, " bytes with tag ", r.tag, " does not fit the ", r.capacity,
                 "-byte receive buffer");
  if (bytes) std::memcpy(r.buf, data, bytes);
  r.done = true;
}

void copy_if_distinct(void* dst, const void* src, std::size_t bytes) {
  if (dst != src && bytes) std::memmove(dst, src, bytes);
}

}  // namespace

LocalCommunicator::LocalCommunicator() : Communicator(0, 1, 0, nullptr) {}

std::unique_ptr<RequestState> LocalCommunicator::do_isend(const void* buf, std::size_t count, DataType type,
                                                          int /*peer*/, int tag) {
  const std::size_t bytes = count * dtype_size(type);
  auto match = std::find_if(unmatched_recvs_.begin(), unmatched_recvs_.end(),
                            [&](const auto& r) { return r->tag == tag; });
  if (match != unmatched_recvs_.end()) {
    deliver(**match, buf, bytes);
    unmatched_recvs_.erase(match);
  } else {
    const auto* p = static_cast<const unsigned char*>(buf);
    unmatched_sends_.push_back({tag, std::vector<unsigned char>(p, p + bytes)});
  }
  return std::make_unique<DoneState>();  // buffered: the send buffer is free at once
}

std::unique_ptr<RequestState> LocalCommunicator::do_irecv(void* buf, std::size_t count, DataType type, int /*peer*/,
                                                          int tag) {
  auto pending = std::make_shared<PendingRecv>();
  pending->buf = buf;
  pending->capacity = count * dtype_size(type);
  pending->tag = tag;
  auto match = std::find_if(unmatched_sends_.begin(), unmatched_sends_.end(),
                            [&](const Message& m) { return m.tag == tag; });
  if (match != unmatched_sends_.end()) {
    deliver(*pending, match->bytes.data(), match->bytes.size());
    unmatched_sends_.erase(match);
  } else {
    unmatched_recvs_.push_back(pending);
  }
  return std::make_unique<RecvState>(std::move(pending));
}

void LocalCommunicator::do_all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp /*op*/) {
  copy_if_distinct(recv, send, count * dtype_size(type));
}

std::unique_ptr<RequestState> LocalCommunicator::do_iall_reduce(const void* send, void* recv, std::size_t count,
                                                                DataType type, ReduceOp op) {
  do_all_reduce(send, recv, count, type, op);
  return std::make_unique<DoneState>();
}

void LocalCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                                          ReduceOp /*op*/) {
  copy_if_distinct(recv, send, count * dtype_size(type));  // one rank: its block is everything
}

void LocalCommunicator::do_all_gather(const void* send, void* recv, std::size_t count, DataType type) {
  copy_if_distinct(recv, send, count * dtype_size(type));
}

// One rank: its piece is the whole buffer.
std::unique_ptr<RequestState> LocalCommunicator::do_ireduce_scatter_v(const void* send, void* recv,
                                                                      const Pieces& pieces, DataType type,
                                                                      ReduceOp /*op*/) {
  copy_if_distinct(recv, send, pieces.count() * dtype_size(type));
  return std::make_unique<DoneState>();
}

std::unique_ptr<RequestState> LocalCommunicator::do_iall_gather_v(const void* send, void* recv, const Pieces& pieces,
                                                                  DataType type) {
  copy_if_distinct(recv, send, pieces.count() * dtype_size(type));
  return std::make_unique<DoneState>();
}

void LocalCommunicator::do_broadcast(void* /*buf*/, std::size_t /*count*/, DataType /*type*/, int /*root*/) {}

std::unique_ptr<Communicator> LocalCommunicator::do_split(int /*color*/, int /*key*/) {
  return std::make_unique<LocalCommunicator>();
}

}  // namespace scalelab
