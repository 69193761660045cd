// The Communicator interface (stage 04): what every distributed stage needs from a backend.
//
//   point to point   send/recv, and isend/irecv returning a Request to wait() on
//   collectives      all_reduce (also non-blocking: iall_reduce), reduce_scatter, all_gather,
//                    broadcast, barrier
//   groups           split(color, key) into sub-communicators (the grid's dp/tp/pp groups)
//
// Backends: LocalCommunicator (one rank, no MPI), MpiCommunicator (OpenMPI, host memory) and,
// on a GPU, an NCCL communicator (device memory) bootstrapped through an MPI communicator. The
// public calls here check their arguments, count every call in stats() (calls, bytes, seconds
// per operation type) and arm the watchdog; backends implement the protected do_* hooks.
//
// Buffers are (pointer, element count, DataType) in the backend's memory_space(). Argument order
// follows MPI and NCCL (send buffer, receive buffer, count), so their manuals read across.
// Reduce-scatter and all-gather take the count of the WHOLE buffer and cut it with
// BlockPartition (comm/partition.hpp): rank r's block is partition.size(r) elements at
// partition.offset(r), for any count. In place: all_reduce with send == recv; reduce_scatter
// with recv == send + offset(rank); all_gather with send == recv + offset(rank).
// Point-to-point messages between two ranks arrive in the order they were posted (MPI's
// non-overtaking rule; NCCL has no tags and orders them the same way).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "comm/comm_stats.hpp"
#include "comm/datatype.hpp"
#include "comm/partition.hpp"
#include "comm/watchdog.hpp"

namespace scalelab {

// A backend's in-flight operation. wait() blocks until it is complete and throws on failure.
// The destructor of one never waited on must leave no buffer in use (MPI: it waits, except
// while an exception unwinds, when the job is about to be aborted anyway).
class RequestState {
 public:
  virtual ~RequestState() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;  // true once complete; never blocks
};

// A handle to a non-blocking operation: move-only, complete after Communicator::wait(). One
// dropped while still pending (destroyed or assigned over without a wait) ends its operation in
// the backend's destructor, which for MPI waits for it: under the communicator's watchdog, so that
// a dropped send whose receive is never posted ends the job with a message naming the rank and
// the peer, as a blocking send would, instead of hanging.
class Request {
 public:
  Request() = default;
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& other) noexcept;
  ~Request() { drop(); }
  bool pending() const { return state_ != nullptr; }

 private:
  friend class Communicator;
  void drop() noexcept;
  void complete() noexcept;  // a receive leaves the communicator's count of those in flight
  std::unique_ptr<RequestState> state_;
  CommOp op_ = CommOp::kSend;
  int peer_ = -1;
  std::uint64_t call_ = 0;                  // the flight recorder's number of the call (0: not recorded)
  std::weak_ptr<Watchdog::Slot> watch_;     // the communicator's watchdog slot, while it lives
  std::weak_ptr<std::uint64_t> in_flight_;  // a receive: its communicator's count, while it lives
};

struct CommOptions {
  // A blocking call that waits longer than this ends the job (comm/watchdog.hpp); 0: never.
  double timeout_seconds = 300;
};

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual const char* backend() const = 0;  // "local", "mpi", "nccl"
  virtual MemorySpace memory_space() const = 0;

  // Point to point. tag must be in [0, 32767] (MPI's guaranteed range); NCCL ignores it.
  Request isend(const void* buf, std::size_t count, DataType type, int peer, int tag = 0);
  Request irecv(void* buf, std::size_t count, DataType type, int peer, int tag = 0);
  void wait(Request& request);
  void wait_all(std::span<Request> requests);
  bool test(Request& request);  // true (and the request done) once complete
  void send(const void* buf, std::size_t count, DataType type, int peer, int tag = 0);
  void recv(void* buf, std::size_t count, DataType type, int peer, int tag = 0);

  // The backend's built-in collectives.
  void all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  Request iall_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  void reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  void all_gather(const void* send, void* recv, std::size_t count, DataType type);
  void broadcast(void* buf, std::size_t count, DataType type, int root);
  void barrier();
  // Uneven reduce-scatter and all-gather (stage 07, ZeRO): rank r's piece is pieces' block r,
  // of any size, empty included. reduce_scatter_v: send holds pieces.count() elements; recv
  // (pieces.size(rank)) gets the sum over ranks of this rank's piece; send and recv must not
  // overlap. all_gather_v: send holds this rank's piece; recv (pieces.count()) gets every piece
  // in place (send may be recv + pieces.offset(rank)). Counted with the ring's exact volumes.
  // The non-blocking forms keep `pieces` themselves; the buffers must live until the wait.
  Request ireduce_scatter_v(const void* send, void* recv, const Pieces& pieces, DataType type, ReduceOp op);
  Request iall_gather_v(const void* send, void* recv, const Pieces& pieces, DataType type);
  void reduce_scatter_v(const void* send, void* recv, const Pieces& pieces, DataType type, ReduceOp op);
  void all_gather_v(const void* send, void* recv, const Pieces& pieces, DataType type);
  // Ranks passing the same color (>= 0) form a new communicator, ordered by key (ties by rank).
  // Collective over this communicator. The result shares this one's watchdog, and is named
  // "<this name>/<split number>:<color>" (the same on every rank of it) for the flight recorder.
  std::unique_ptr<Communicator> split(int color, int key);

  // Typed shorthands for the common in-place forms.
  template <typename T>
  void all_reduce(T* data, std::size_t count, ReduceOp op = ReduceOp::kSum) {
    all_reduce(data, data, count, dtype_of<T>(), op);
  }
  template <typename T>
  void broadcast(T* data, std::size_t count, int root) {
    broadcast(static_cast<void*>(data), count, dtype_of<T>(), root);
  }

  CommStats& stats() { return stats_; }
  const CommStats& stats() const { return stats_; }
  BlockPartition partition(std::size_t count) const { return {count, size_}; }
  // The watchdog slot of this communicator (null without a watchdog), for backends and tests.
  // Its entry holds the flight recorder's last calls (comm/flight_recorder.hpp).
  Watchdog::Slot* watch_slot() const { return slot_.get(); }
  // The flight recorder's name for this communicator: "world" for one not made by split().
  const std::string& name() const { return name_; }

 protected:
  // world_rank names this rank in the watchdog's message; watchdog may be null.
  Communicator(int rank, int size, int world_rank, std::shared_ptr<Watchdog> watchdog);
  const std::shared_ptr<Watchdog>& watchdog() const { return watchdog_; }
  int world_rank() const { return world_rank_; }

  virtual std::unique_ptr<RequestState> do_isend(const void* buf, std::size_t count, DataType type, int peer,
                                                 int tag) = 0;
  virtual std::unique_ptr<RequestState> do_irecv(void* buf, std::size_t count, DataType type, int peer, int tag) = 0;
  virtual void do_all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) = 0;
  virtual std::unique_ptr<RequestState> do_iall_reduce(const void* send, void* recv, std::size_t count, DataType type,
                                                       ReduceOp op) = 0;
  virtual void do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) = 0;
  virtual void do_all_gather(const void* send, void* recv, std::size_t count, DataType type) = 0;
  virtual void do_broadcast(void* buf, std::size_t count, DataType type, int root) = 0;
  // The uneven collectives; by default a ConfigError naming the backend (the mpi and local
  // backends have them).
  virtual std::unique_ptr<RequestState> do_ireduce_scatter_v(const void* send, void* recv, const Pieces& pieces,
                                                             DataType type, ReduceOp op);
  virtual std::unique_ptr<RequestState> do_iall_gather_v(const void* send, void* recv, const Pieces& pieces,
                                                         DataType type);
  virtual void do_barrier() = 0;
  virtual std::unique_ptr<Communicator> do_split(int color, int key) = 0;

 private:
  void check_peer(int peer, const char* what) const;
  void check_buffer(const void* buf, std::size_t count, const char* what) const;
  // The flight recorder around a call (nothing without a watchdog): begin returns the call's
  // number, which end and the watchdog's slot take.
  std::uint64_t record_begin(CommOp op, bool collective, std::size_t count, int peer);
  // A Request for a non-blocking call about to start: recorded, and watched if it is dropped.
  Request begin_request(CommOp op, bool collective, std::size_t count, int peer);
  void record_end(std::uint64_t call);
  class Recorded;

  int rank_;
  int size_;
  int world_rank_;
  std::shared_ptr<Watchdog> watchdog_;
  std::shared_ptr<Watchdog::Slot> slot_;
  CommStats stats_;
  // Receives posted and not yet complete (stats_'s peak_recvs_in_flight). Shared with their
  // Requests, which may outlive this communicator.
  std::shared_ptr<std::uint64_t> recvs_in_flight_ = std::make_shared<std::uint64_t>(0);
  std::string name_ = "world";
  int splits_ = 0;  // split() calls so far: the next child's number in its name
};

}  // namespace scalelab
