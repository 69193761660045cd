// The MPI backend (stage 04): a Communicator over an MPI communicator, for host memory. Every
// MPI call is checked (errors return, they do not abort silently) and reports the call, the
// place and the rank. Only compiled when MPI is found (reference/CMakeLists.txt).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "comm/communicator.hpp"

namespace scalelab {

// Throws scalelab::Error naming the call, file:line, world rank and MPI's own message.
void check_mpi(int rc, const char* call, const char* file, int line);
#define SCALELAB_MPI_CHECK(call) ::scalelab::check_mpi((call), #call, __FILE__, __LINE__)
// The same message as a warning on stderr, for destructors, which must not throw.
void warn_mpi(int rc, const char* call, const char* file, int line) noexcept;
#define SCALELAB_MPI_WARN(call) ::scalelab::warn_mpi((call), #call, __FILE__, __LINE__)

// The MPI handles of a DataType and of a ReduceOp on it (the 16-bit floats: our own, see
// mpi_communicator.cpp).
MPI_Datatype mpi_datatype(DataType t);
MPI_Op mpi_op(ReduceOp op, DataType t);

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of comm (MPI_Comm_free on destruction, which must come before
  // MPI_Finalize) and switches its error handler to MPI_ERRORS_RETURN.
  MpiCommunicator(MPI_Comm comm, std::shared_ptr<Watchdog> watchdog);
  ~MpiCommunicator() override;
  const char* backend() const override { return "mpi"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  MPI_Comm handle() const { return comm_; }

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
  void do_barrier() override;
  std::unique_ptr<Communicator> do_split(int color, int key) override;

 private:
  MPI_Comm comm_;
};

// MPI_Init on construction (unless MPI is already initialised: then this session owns nothing)
// and MPI_Finalize on destruction. One per process, outliving every MpiCommunicator. It asks for
// MPI_THREAD_MULTIPLE, because the watchdog's thread calls MPI_Abort while the main thread is
// blocked in MPI; every other MPI call is made by the main thread.
class MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  static int world_rank();  // -1 if MPI cannot say (never throws: check_mpi's messages use it)
  static int world_size();
  // Whether MPI gave MPI_THREAD_MULTIPLE, so that the watchdog's thread may call MPI_Abort.
  static bool thread_multiple();
  // A duplicate of MPI_COMM_WORLD (so our messages never meet the caller's own MPI traffic),
  // with the watchdog and, over several ranks, the job's flight board (comm/flight_board.hpp).
  // Collective over MPI_COMM_WORLD.
  std::unique_ptr<MpiCommunicator> world(const CommOptions& options);
  // Prints "scalelab: <message>" to stderr and ends every rank of the job with MPI_Abort.
  // Called from the main thread (or any thread under MPI_THREAD_MULTIPLE).
  [[noreturn]] static void abort_job(const std::string& message, int exit_code);
  // The watchdog's way out, from its own thread: abort_job under MPI_THREAD_MULTIPLE, else the
  // message and the end of this process alone (the launcher then ends the others).
  [[noreturn]] static void watchdog_end_job(const std::string& message, int exit_code);

 private:
  bool owns_mpi_ = false;
};

}  // namespace scalelab
