// The one-rank communicator (stage 04): rank 0 of 1, host memory, no MPI. Every collective is
// a copy (or nothing, in place), so single-process training runs the same code path as DDP with
// one rank. Messages to itself are buffered and matched by tag in posting order, as MPI does; a
// receive that nothing will ever match fails at wait() instead of blocking forever.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"

namespace scalelab {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator();
  const char* backend() const override { return "local"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }

  struct PendingRecv;  // a posted receive not yet matched (defined in the .cpp)

 protected:
  std::unique_ptr<RequestState> do_isend(const void* buf, std::size_t count, DataType type, int peer, int tag) override;
  std::unique_ptr<RequestState> do_irecv(void* buf, std::size_t count, DataType type, int peer, int tag) override;
  void do_all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) override;
  std::unique_ptr<RequestState> do_iall_reduce(const void* send, void* recv, std::size_t count, DataType type,
                                               ReduceOp op) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) override;
  void do_all_gather(const void* send, void* recv, std::size_t count, DataType type) override;
  void do_broadcast(void* buf, std::size_t count, DataType type, int root) override;
  std::unique_ptr<RequestState> do_ireduce_scatter_v(const void* send, void* recv, const Pieces& pieces, DataType type,
                                                     ReduceOp op) override;
  std::unique_ptr<RequestState> do_iall_gather_v(const void* send, void* recv, const Pieces& pieces,
                                                 DataType type) override;
  void do_barrier() override {}
  std::unique_ptr<Communicator> do_split(int color, int key) override;

 private:
  struct Message {
    int tag;
    std::vector<unsigned char> bytes;
  };
  std::deque<Message> unmatched_sends_;
  std::deque<std::shared_ptr<PendingRecv>> unmatched_recvs_;
};

}  // namespace scalelab
