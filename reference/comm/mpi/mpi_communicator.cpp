// The MPI backend: each Communicator call maps onto one MPI call. Uneven reduce-scatter and
// all-gather use the v-variants with BlockPartition's counts.
#include "comm/mpi/mpi_communicator.hpp"

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "core/error.hpp"

namespace scalelab {

namespace {
std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) std::snprintf(text, sizeof text, "error code %d", rc);
  return text;
}
}  // namespace

void check_mpi(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  throw Error(detail::concat(file, ":", line, ": ", call, " failed on rank ", MpiSession::world_rank(), ": ",
                             mpi_error_text(rc)));
}

void warn_mpi(int rc, const char* call, const char* file, int line) noexcept {
  if (rc == MPI_SUCCESS) return;
  std::fprintf(stderr, "scalelab: warning: %s:%d: %s failed on rank %d: %s\n", file, line, call,
               MpiSession::world_rank(), mpi_error_text(rc).c_str());
}

namespace {

// MPI has no 16-bit float types (MPI 4.0 names none, and OpenMPI's MPI_SUM cannot add bf16), so
// bf16 and fp16 travel as 2-byte types of our own, and their reductions are user-defined
// operations that call reduce_host (comm/datatype.hpp: add in fp32, round to nearest even, as
// NCCL does). A user function sees the datatype handle, so one operation per ReduceOp serves
// both types. The handles are made at the first 16-bit call, after MPI_Init, and live until
// MPI_Finalize, which releases them.
struct HalfTypes {
  MPI_Datatype bf16 = MPI_DATATYPE_NULL, fp16 = MPI_DATATYPE_NULL;
  MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL, min = MPI_OP_NULL;
};

template <ReduceOp kOp>
void reduce_half_op(void* in, void* inout, int* len, MPI_Datatype* type);

const HalfTypes& half_types() {
  static const HalfTypes types = [] {
    HalfTypes t;
    for (MPI_Datatype* dt : {&t.bf16, &t.fp16}) {
      SCALELAB_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, dt));
      SCALELAB_MPI_CHECK(MPI_Type_commit(dt));
    }
    SCALELAB_MPI_CHECK(MPI_Op_create(&reduce_half_op<ReduceOp::kSum>, 1, &t.sum));
    SCALELAB_MPI_CHECK(MPI_Op_create(&reduce_half_op<ReduceOp::kMax>, 1, &t.max));
    SCALELAB_MPI_CHECK(MPI_Op_create(&reduce_half_op<ReduceOp::kMin>, 1, &t.min));
    return t;
  }();
  return types;
}

// MPI's contract for a user function: inout[i] = in[i] op inout[i]; the sum is commutative, so
// reduce_host's inout += in gives the same bits.
template <ReduceOp kOp>
void reduce_half_op(void* in, void* inout, int* len, MPI_Datatype* type) {
  const DataType t = *type == half_types().bf16 ? DataType::kBFloat16 : DataType::kFloat16;
  reduce_host(inout, in, static_cast<std::size_t>(*len), t, kOp);
}

bool is_half(DataType t) { return t == DataType::kBFloat16 || t == DataType::kFloat16; }

}  // namespace

MPI_Datatype mpi_datatype(DataType t) {
  switch (t) {
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kBFloat16: return half_types().bf16;
    case DataType::kFloat16: return half_types().fp16;
  }
  throw Error(detail::concat("unknown DataType ", static_cast<int>(t)));
}

MPI_Op mpi_op(ReduceOp op, DataType t) {
  const bool half = is_half(t);
  switch (op) {
    case ReduceOp::kSum: return half ? half_types().sum : MPI_SUM;
    case ReduceOp::kMax: return half ? half_types().max : MPI_MAX;
    case ReduceOp::kMin: return half ? half_types().min : MPI_MIN;
  }
  throw Error(detail::concat("unknown ReduceOp ", static_cast<int>(op)));
}

namespace {

// MPI counts are ints; a larger message would need splitting, which nothing here needs yet.
int mpi_count(std::size_t count) {
  SCALELAB_CHECK(count <= static_cast<std::size_t>(INT_MAX), "MPI message of ", count,
                 " elements exceeds INT_MAX; split it into smaller messages");
  return static_cast<int>(count);
}

class MpiRequestState final : public RequestState {
 public:
  MPI_Request request = MPI_REQUEST_NULL;
  ~MpiRequestState() override {
    if (request == MPI_REQUEST_NULL) return;
    // Never waited on: wait, so that MPI stops using the buffer before its owner frees it. While
    // an exception unwinds the job is about to be aborted and the peer may never answer: release.
    if (std::uncaught_exceptions() > 0)
      SCALELAB_MPI_WARN(MPI_Request_free(&request));
    else
      SCALELAB_MPI_WARN(MPI_Wait(&request, MPI_STATUS_IGNORE));
  }
  void wait() override { SCALELAB_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE)); }
  bool test() override {
    int done = 0;
    SCALELAB_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }
};

// Element counts and offsets of the blocks, for the v-variants.
// A non-blocking collective whose count arrays MPI reads until it completes: the state keeps them.
class MpiVectorRequestState final : public RequestState {
 public:
  explicit MpiVectorRequestState(const Pieces& pieces) {
    for (int b = 0; b < pieces.parts(); ++b) {
      counts.push_back(mpi_count(pieces.size(b)));
      displs.push_back(mpi_count(pieces.offset(b)));
    }
  }
  std::vector<int> counts, displs;
  MpiRequestState inner;
  void wait() override { inner.wait(); }
  bool test() override { return inner.test(); }
};

void block_layout(std::size_t count, int n, std::vector<int>& counts, std::vector<int>& displs) {
  const BlockPartition p{count, n};
  counts.resize(static_cast<std::size_t>(n));
  displs.resize(static_cast<std::size_t>(n));
  for (int b = 0; b < n; ++b) {
    counts[static_cast<std::size_t>(b)] = mpi_count(p.size(b));
    displs[static_cast<std::size_t>(b)] = mpi_count(p.offset(b));
  }
}

}  // namespace

namespace {
int comm_rank(MPI_Comm comm) {
  int r = 0;
  SCALELAB_MPI_CHECK(MPI_Comm_rank(comm, &r));
  return r;
}
int comm_size(MPI_Comm comm) {
  int s = 1;
  SCALELAB_MPI_CHECK(MPI_Comm_size(comm, &s));
  return s;
}
}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::shared_ptr<Watchdog> watchdog)
    : Communicator(comm_rank(comm), comm_size(comm), MpiSession::world_rank(), std::move(watchdog)), comm_(comm) {
  SCALELAB_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
}

MpiCommunicator::~MpiCommunicator() {
  // A destructor cannot throw: a failure here is reported, and the job goes on ending.
  int finalized = 0;
  SCALELAB_MPI_WARN(MPI_Finalized(&finalized));
  if (!finalized && comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD) SCALELAB_MPI_WARN(MPI_Comm_free(&comm_));
}

std::unique_ptr<RequestState> MpiCommunicator::do_isend(const void* buf, std::size_t count, DataType type, int peer,
                                                        int tag) {
  auto state = std::make_unique<MpiRequestState>();
  SCALELAB_MPI_CHECK(MPI_Isend(buf, mpi_count(count), mpi_datatype(type), peer, tag, comm_, &state->request));
  return state;
}

std::unique_ptr<RequestState> MpiCommunicator::do_irecv(void* buf, std::size_t count, DataType type, int peer,
                                                        int tag) {
  auto state = std::make_unique<MpiRequestState>();
  SCALELAB_MPI_CHECK(MPI_Irecv(buf, mpi_count(count), mpi_datatype(type), peer, tag, comm_, &state->request));
  return state;
}

void MpiCommunicator::do_all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  const void* in = send == recv ? MPI_IN_PLACE : send;
  SCALELAB_MPI_CHECK(MPI_Allreduce(in, recv, mpi_count(count), mpi_datatype(type), mpi_op(op, type), comm_));
}

std::unique_ptr<RequestState> MpiCommunicator::do_iall_reduce(const void* send, void* recv, std::size_t count,
                                                              DataType type, ReduceOp op) {
  auto state = std::make_unique<MpiRequestState>();
  const void* in = send == recv ? MPI_IN_PLACE : send;
  SCALELAB_MPI_CHECK(
      MPI_Iallreduce(in, recv, mpi_count(count), mpi_datatype(type), mpi_op(op, type), comm_, &state->request));
  return state;
}

void MpiCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  const int n = size();
  const BlockPartition p = partition(count);
  const std::size_t elem = dtype_size(type);
  const std::size_t mine = p.size(rank());
  const MPI_Datatype dt = mpi_datatype(type);
  // In place (recv == send + offset(rank)): MPI's in-place form leaves the result at the start
  // of the buffer, so move it to this rank's block afterwards.
  const bool in_place = static_cast<const char*>(send) + p.offset(rank()) * elem == static_cast<const char*>(recv);
  void* full = const_cast<void*>(send);  // in place: the caller handed us the buffer to overwrite
  if (count % static_cast<std::size_t>(n) == 0) {
    if (in_place)
      SCALELAB_MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, full, mpi_count(mine), dt, mpi_op(op, type), comm_));
    else
      SCALELAB_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, mpi_count(mine), dt, mpi_op(op, type), comm_));
  } else {
    std::vector<int> counts, displs;
    block_layout(count, n, counts, displs);
    if (in_place)
      SCALELAB_MPI_CHECK(MPI_Reduce_scatter(MPI_IN_PLACE, full, counts.data(), dt, mpi_op(op, type), comm_));
    else
      SCALELAB_MPI_CHECK(MPI_Reduce_scatter(send, recv, counts.data(), dt, mpi_op(op, type), comm_));
  }
  if (in_place && recv != full && mine) std::memmove(recv, full, mine * elem);
}

void MpiCommunicator::do_all_gather(const void* send, void* recv, std::size_t count, DataType type) {
  const int n = size();
  const BlockPartition p = partition(count);
  const std::size_t elem = dtype_size(type);
  const MPI_Datatype dt = mpi_datatype(type);
  const bool in_place = static_cast<const char*>(recv) + p.offset(rank()) * elem == static_cast<const char*>(send);
  const void* in = in_place ? MPI_IN_PLACE : send;
  if (count % static_cast<std::size_t>(n) == 0) {
    const int block = mpi_count(count / static_cast<std::size_t>(n));
    SCALELAB_MPI_CHECK(MPI_Allgather(in, block, dt, recv, block, dt, comm_));
  } else {
    std::vector<int> counts, displs;
    block_layout(count, n, counts, displs);
    SCALELAB_MPI_CHECK(MPI_Allgatherv(in, counts[static_cast<std::size_t>(rank())], dt, recv, counts.data(),
                                      displs.data(), dt, comm_));
  }
}

std::unique_ptr<RequestState> MpiCommunicator::do_ireduce_scatter_v(const void* send, void* recv, const Pieces& pieces,
                                                                    DataType type, ReduceOp op) {
  auto state = std::make_unique<MpiVectorRequestState>(pieces);
  SCALELAB_MPI_CHECK(MPI_Ireduce_scatter(send, recv, state->counts.data(), mpi_datatype(type), mpi_op(op, type), comm_,
                                         &state->inner.request));
  return state;
}

std::unique_ptr<RequestState> MpiCommunicator::do_iall_gather_v(const void* send, void* recv, const Pieces& pieces,
                                                                DataType type) {
  auto state = std::make_unique<MpiVectorRequestState>(pieces);
  const std::size_t own = static_cast<std::size_t>(rank());
  const bool in_place = static_cast<const char*>(recv) + pieces.offset(rank()) * dtype_size(type) ==
                        static_cast<const char*>(send);
  const MPI_Datatype dt = mpi_datatype(type);
  SCALELAB_MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, state->counts[own], dt, recv, state->counts.data(),
                                     state->displs.data(), dt, comm_, &state->inner.request));
  return state;
}

void MpiCommunicator::do_broadcast(void* buf, std::size_t count, DataType type, int root) {
  SCALELAB_MPI_CHECK(MPI_Bcast(buf, mpi_count(count), mpi_datatype(type), root, comm_));
}

void MpiCommunicator::do_barrier() { SCALELAB_MPI_CHECK(MPI_Barrier(comm_)); }

std::unique_ptr<Communicator> MpiCommunicator::do_split(int color, int key) {
  MPI_Comm sub = MPI_COMM_NULL;
  SCALELAB_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  return std::make_unique<MpiCommunicator>(sub, watchdog());
}

// ---- the session -------------------------------------------------------------------------------

namespace {
// Set once by the session, read by the watchdog thread when it fires.
std::atomic<bool> g_thread_multiple{false};
}  // namespace

MpiSession::MpiSession() {
  int initialized = 0;
  SCALELAB_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) {
    int level = MPI_THREAD_SINGLE;
    SCALELAB_MPI_CHECK(MPI_Query_thread(&level));
    g_thread_multiple = level == MPI_THREAD_MULTIPLE;
    return;
  }
  // The main thread makes every MPI call but one: when a call has waited too long, the
  // watchdog's own thread calls MPI_Abort while the main thread is still blocked inside MPI. The
  // standard allows two threads in MPI at once only at MPI_THREAD_MULTIPLE (FUNNELED and
  // SERIALIZED do not), so ask for it, and check what MPI gave: without it the watchdog ends its
  // own process instead (watchdog_end_job) and leaves the rest of the job to the launcher.
  int provided = MPI_THREAD_SINGLE;
  SCALELAB_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
  owns_mpi_ = true;
  g_thread_multiple = provided == MPI_THREAD_MULTIPLE;
  SCALELAB_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
}

MpiSession::~MpiSession() {
  int finalized = 0;
  SCALELAB_MPI_WARN(MPI_Finalized(&finalized));
  if (owns_mpi_ && !finalized) SCALELAB_MPI_WARN(MPI_Finalize());
}

bool MpiSession::thread_multiple() { return g_thread_multiple; }

int MpiSession::world_rank() {
  // Used inside check_mpi's own message, so it must not throw: -1 when MPI cannot tell.
  int initialized = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS) return -1;
  if (!initialized) return 0;
  int r = 0;
  if (MPI_Comm_rank(MPI_COMM_WORLD, &r) != MPI_SUCCESS) return -1;
  return r;
}

int MpiSession::world_size() { return comm_size(MPI_COMM_WORLD); }

namespace {

// The flight board over `comm` (collective): rank 0's directory name travels by broadcast.
std::shared_ptr<FlightBoard> open_flight_board(MPI_Comm comm) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  if (size == 1) return nullptr;  // one rank: the watchdog's private board serves
  auto share = [&](const std::string& text) {
    int length = static_cast<int>(text.size());
    SCALELAB_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, 0, comm));
    std::string out = text;
    out.resize(static_cast<std::size_t>(length));
    SCALELAB_MPI_CHECK(MPI_Bcast(out.data(), length, MPI_CHAR, 0, comm));
    return out;
  };
  auto barrier = [&] { SCALELAB_MPI_CHECK(MPI_Barrier(comm)); };
  return FlightBoard::open_shared(rank, size, share, barrier);
}

}  // namespace

std::unique_ptr<MpiCommunicator> MpiSession::world(const CommOptions& options) {
  MPI_Comm dup = MPI_COMM_NULL;
  SCALELAB_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  try {
    SCALELAB_MPI_CHECK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
    std::shared_ptr<Watchdog> watchdog;
    if (options.timeout_seconds > 0)
      watchdog = std::make_shared<Watchdog>(
          options.timeout_seconds, [](const std::string& message) { watchdog_end_job(message, 3); },
          open_flight_board(dup));
    return std::make_unique<MpiCommunicator>(dup, std::move(watchdog));
  } catch (...) {
    SCALELAB_MPI_WARN(MPI_Comm_free(&dup));
    throw;
  }
}

void MpiSession::abort_job(const std::string& message, int exit_code) {
  std::fprintf(stderr, "scalelab: %s\n", message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::abort();  // MPI_Abort does not return; if it ever did, still end this process
}

void MpiSession::watchdog_end_job(const std::string& message, int exit_code) {
  if (thread_multiple()) abort_job(message, exit_code);
  // Not allowed to call MPI from this thread: end this process alone. mpirun then ends the
  // others (a rank that exits without MPI_Finalize ends the job), as other launchers do. The
  // one place in the library that ends the process: the watchdog's thread cannot throw to
  // main(), and the main thread is stuck; _Exit runs no destructors that could block on MPI.
  std::fprintf(stderr,
               "scalelab: %s\nscalelab: (MPI gave no MPI_THREAD_MULTIPLE, so this rank ends alone; "
               "the launcher ends the others)\n",
               message.c_str());
  std::fflush(stderr);
  std::_Exit(exit_code);
}

}  // namespace scalelab
