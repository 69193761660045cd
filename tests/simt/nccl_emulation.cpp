// The NCCL calls of kernels/comm, on the CPU: with the emulated runtime (runtime_emulation.cpp)
// "device" memory is host memory, so a collective is MPI's on the same buffers (or, for a
// communicator of one rank made without MPI, a copy). Written from nccl.h's documentation:
//   - an operation has finished when its call returns, as every emulated stream's work has:
//     outside a group it runs at once, blocking; inside ncclGroupStart/End every operation is
//     posted non-blocking at ncclGroupEnd, and ncclGroupEnd waits for them all (NCCL's group
//     kernel, which the stream then waits for, ends when all of them have);
//   - in-place forms as nccl.h gives them (all-reduce send == recv; reduce-scatter recv == send
//     + rank * recvcount; all-gather send == recv + rank * sendcount); any other overlap is
//     refused, as NCCL's results would be undefined;
//   - send and receive match in posting order per peer (NCCL has no tags), as MPI's do on one tag;
//   - 16-bit floats are added in fp32 and rounded at every step (NCCL's rule; the order differs).
// ncclCommInitRank forms the ranks' MPI communicator with MPI_Comm_create_group, so only the
// members take part (the id names the rank that made it, which must be one of them, as in
// kernels/comm/nccl_bootstrap.cpp); ncclCommSplit is MPI_Comm_split of the parent's.
// Not emulated: asynchronous errors (none happen), configs, user operators, registration.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#ifdef SCALELAB_EMULATED_NCCL_MPI
#include <mpi.h>
#endif

namespace {

std::size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

bool overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

// A send or receive of a one-rank communicator, waiting for its partner.
struct LocalP2p {
  void* buf;
  std::size_t bytes;
};

}  // namespace

struct ncclComm {
  int rank = 0;
  int size = 1;
#ifdef SCALELAB_EMULATED_NCCL_MPI
  MPI_Comm mpi = MPI_COMM_NULL;  // null: one rank, made without MPI
#endif
  std::deque<LocalP2p> sends, recvs;  // one rank: its sends to itself and receives from itself
};

namespace {

// What the operations of one call or group have started: MPI's requests, work to run once all
// of them have completed (a one-rank communicator's matching of sends to receives), and the
// temporaries the requests read.
struct Posted {
#ifdef SCALELAB_EMULATED_NCCL_MPI
  std::vector<MPI_Request> requests;
#endif
  std::vector<std::function<void()>> after;
  std::deque<std::vector<char>> keep;  // temporaries the requests read (a deque: they never move)
};
using Operation = std::function<ncclResult_t(Posted&)>;

struct GroupState {
  int depth = 0;
  std::vector<Operation> queued;
};
GroupState& group() {
  thread_local GroupState g;
  return g;
}

ncclResult_t complete(Posted& posted) {
#ifdef SCALELAB_EMULATED_NCCL_MPI
  if (!posted.requests.empty() &&
      MPI_Waitall(static_cast<int>(posted.requests.size()), posted.requests.data(), MPI_STATUSES_IGNORE) != MPI_SUCCESS)
    return ncclSystemError;
#endif
  for (auto& f : posted.after) f();
  return ncclSuccess;
}

// Runs `op` now, or queues it until ncclGroupEnd.
ncclResult_t enqueue(Operation op) {
  if (group().depth > 0) {
    group().queued.push_back(std::move(op));
    return ncclSuccess;
  }
  Posted posted;
  const ncclResult_t rc = op(posted);
  if (rc != ncclSuccess) return rc;
  return complete(posted);
}

// A one-rank communicator's sends and receives to itself, paired in posting order.
void match_local(ncclComm* comm) {
  while (!comm->sends.empty() && !comm->recvs.empty()) {
    const LocalP2p s = comm->sends.front(), r = comm->recvs.front();
    comm->sends.pop_front();
    comm->recvs.pop_front();
    std::memmove(r.buf, s.buf, std::min(s.bytes, r.bytes));
  }
}

ncclResult_t check_comm(const ncclComm* comm, std::size_t count, ncclDataType_t type) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (type_size(type) == 0 || count > static_cast<std::size_t>(INT_MAX)) return ncclInvalidArgument;
  return ncclSuccess;
}

#ifdef SCALELAB_EMULATED_NCCL_MPI

template <typename H>
float widen(H x) {
  if constexpr (std::is_same_v<H, __nv_bfloat16>)
    return __bfloat162float(x);
  else
    return __half2float(x);
}
template <typename H>
H narrow(float x) {
  if constexpr (std::is_same_v<H, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else
    return __float2half_rn(x);
}
// MPI's user operator for a 16-bit float: each pair widened to fp32, combined, rounded.
template <typename H, ncclRedOp_t Op>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = widen(a[i]), y = widen(b[i]);
    b[i] = narrow<H>(Op == ncclSum ? x + y : Op == ncclMax ? std::max(x, y) : std::min(x, y));
  }
}
template <typename H>
MPI_Op half_mpi_op(ncclRedOp_t op) {
  static MPI_Op ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // made after MPI_Init, once
  const int i = op == ncclSum ? 0 : op == ncclMax ? 1 : 2;
  if (ops[i] == MPI_OP_NULL) {
    MPI_User_function* f = i == 0 ? half_op<H, ncclSum> : i == 1 ? half_op<H, ncclMax> : half_op<H, ncclMin>;
    MPI_Op_create(f, 1, &ops[i]);
  }
  return ops[i];
}

MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    case ncclFloat16:
    case ncclBfloat16: return MPI_UINT16_T;  // combined by half_mpi_op's operators
    default: return MPI_BYTE;
  }
}

ncclResult_t mpi_op(ncclDataType_t t, ncclRedOp_t op, MPI_Op* out) {
  if (op != ncclSum && op != ncclMax && op != ncclMin) return ncclInvalidArgument;  // prod, avg: not used
  if (t == ncclBfloat16) {
    *out = half_mpi_op<__nv_bfloat16>(op);
  } else if (t == ncclFloat16) {
    *out = half_mpi_op<__half>(op);
  } else {
    *out = op == ncclSum ? MPI_SUM : op == ncclMax ? MPI_MAX : MPI_MIN;
  }
  return ncclSuccess;
}

// A copy of `bytes` from `src` that the posted operation reads instead of src (which overlaps
// the receive buffer in an in-place form MPI spells differently).
const void* staged(Posted& p, const void* src, std::size_t bytes) {
  const char* from = static_cast<const char*>(src);
  return p.keep.emplace_back(from, from + bytes).data();
}

ncclResult_t ok(int mpi_rc) { return mpi_rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError; }

// Posts one non-blocking MPI call (`call` fills the request) into the group's operations.
template <typename Call>
ncclResult_t post(Posted& p, Call call) {
  MPI_Request r;
  const int rc = call(&r);
  if (rc == MPI_SUCCESS) p.requests.push_back(r);
  return ok(rc);
}
// The same for a reduction: `call` also gets MPI's operator for (type, op).
template <typename Call>
ncclResult_t post_reduction(Posted& p, ncclDataType_t type, ncclRedOp_t op, Call call) {
  MPI_Op mop;
  if (const ncclResult_t rc = mpi_op(type, op, &mop); rc != ncclSuccess) return rc;
  return post(p, [&](MPI_Request* r) { return call(mop, r); });
}

// Tags of ncclCommInitRank's exchange on MPI_COMM_WORLD (the project's own MPI traffic runs on
// duplicates of it, so these cannot meet it).
constexpr int kTagBase = 30000;

struct UniqueId {
  char magic[16];
  int creator;  // world rank of the process that made the id
  int sequence;
};
constexpr char kMagic[16] = "scalelab-nccl";

#endif  // SCALELAB_EMULATED_NCCL_MPI

// With one rank every collective is a copy of the rank's own data.
void local_copy(void* dst, const void* src, std::size_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (emulated NCCL)";
    case ncclSystemError: return "unhandled system error (emulated NCCL: an MPI call failed)";
    case ncclInternalError: return "internal error (emulated NCCL)";
    case ncclInvalidArgument: return "invalid argument (emulated NCCL)";
    case ncclInvalidUsage: return "invalid usage (emulated NCCL)";
    case ncclRemoteError: return "remote process exited or there was a network error (emulated NCCL)";
    case ncclInProgress: return "NCCL operation in progress (emulated NCCL)";
    default: return "unknown result code (emulated NCCL)";
  }
}
const char* ncclGetLastError(ncclComm_t) { return ""; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof *id);
#ifdef SCALELAB_EMULATED_NCCL_MPI
  static int sequence = 0;
  UniqueId u{};
  std::memcpy(u.magic, kMagic, sizeof kMagic);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &u.creator);
  u.sequence = sequence++;
  std::memcpy(id->internal, &u, sizeof u);
#endif
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  auto c = std::make_unique<ncclComm>();
  c->rank = rank;
  c->size = nranks;
  if (nranks > 1) {
#ifdef SCALELAB_EMULATED_NCCL_MPI
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) return ncclInvalidUsage;  // several ranks need MPI underneath
    UniqueId u;
    std::memcpy(&u, id.internal, sizeof u);
    if (std::memcmp(u.magic, kMagic, sizeof kMagic) != 0) return ncclInvalidArgument;
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    const int tag = kTagBase + 3 * (u.sequence % 900);
    // The creator learns every member's world rank, in communicator order, and tells them all.
    std::vector<int> world_ranks(static_cast<std::size_t>(nranks), -1);
    if (me == u.creator) {
      world_ranks[static_cast<std::size_t>(rank)] = me;
      for (int i = 1; i < nranks; ++i) {
        int pair[2];
        if (MPI_Recv(pair, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS)
          return ncclSystemError;
        if (pair[1] < 0 || pair[1] >= nranks || world_ranks[static_cast<std::size_t>(pair[1])] != -1)
          return ncclInvalidUsage;  // two processes claimed one rank
        world_ranks[static_cast<std::size_t>(pair[1])] = pair[0];
      }
      for (int r = 0; r < nranks; ++r)
        if (r != rank && MPI_Send(world_ranks.data(), nranks, MPI_INT, world_ranks[static_cast<std::size_t>(r)],
                                  tag + 1, MPI_COMM_WORLD) != MPI_SUCCESS)
          return ncclSystemError;
    } else {
      const int pair[2] = {me, rank};
      if (MPI_Send(pair, 2, MPI_INT, u.creator, tag, MPI_COMM_WORLD) != MPI_SUCCESS ||
          MPI_Recv(world_ranks.data(), nranks, MPI_INT, u.creator, tag + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE) !=
              MPI_SUCCESS)
        return ncclSystemError;
    }
    MPI_Group world_group, members;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, nranks, world_ranks.data(), &members);
    const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, members, tag + 2, &c->mpi);
    MPI_Group_free(&members);
    MPI_Group_free(&world_group);
    if (rc != MPI_SUCCESS) return ncclSystemError;
#else
    (void)id;
    return ncclInvalidUsage;  // built without MPI: one rank only
#endif
  }
  *comm = c.release();
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  if (comm == nullptr) return ncclInvalidArgument;
  *newcomm = nullptr;
#ifdef SCALELAB_EMULATED_NCCL_MPI
  if (comm->mpi != MPI_COMM_NULL) {
    MPI_Comm sub = MPI_COMM_NULL;
    if (MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &sub) != MPI_SUCCESS)
      return ncclSystemError;
    if (sub == MPI_COMM_NULL) return ncclSuccess;
    auto c = std::make_unique<ncclComm>();
    c->mpi = sub;
    MPI_Comm_rank(sub, &c->rank);
    MPI_Comm_size(sub, &c->size);
    *newcomm = c.release();
    return ncclSuccess;
  }
#endif
  (void)key;
  if (color != NCCL_SPLIT_NOCOLOR) *newcomm = new ncclComm{};
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
#ifdef SCALELAB_EMULATED_NCCL_MPI
  if (comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
#endif
  delete comm;
  return ncclSuccess;
}
// Abort does not wait for peers: the MPI communicator is left to MPI_Finalize.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async) {
  if (comm == nullptr) return ncclInvalidArgument;
  *async = ncclSuccess;
  return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr) return ncclInvalidArgument;
  *count = comm->size;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group().depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  GroupState& g = group();
  if (g.depth == 0) return ncclInvalidUsage;
  if (--g.depth > 0) return ncclSuccess;
  std::vector<Operation> ops = std::move(g.queued);
  g.queued.clear();
  Posted posted;
  for (Operation& op : ops)
    if (const ncclResult_t rc = op(posted); rc != ncclSuccess) return rc;
  return complete(posted);
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  if (const ncclResult_t rc = check_comm(comm, count, type); rc != ncclSuccess) return rc;
  const std::size_t bytes = count * type_size(type);
  if (send != recv && overlap(send, bytes, recv, bytes)) return ncclInvalidArgument;
  return enqueue([=](Posted& p) -> ncclResult_t {
#ifdef SCALELAB_EMULATED_NCCL_MPI
    if (comm->mpi != MPI_COMM_NULL)
      return post_reduction(p, type, op, [&](MPI_Op mop, MPI_Request* r) {
        return MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count), mpi_type(type), mop,
                              comm->mpi, r);
      });
#endif
    (void)p, (void)op;
    local_copy(recv, send, bytes);
    return ncclSuccess;
  });
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t) {
  if (const ncclResult_t rc = check_comm(comm, count, type); rc != ncclSuccess) return rc;
  if (root < 0 || root >= comm->size) return ncclInvalidArgument;
  const std::size_t bytes = count * type_size(type);
  if (comm->rank == root && send != recv && overlap(send, bytes, recv, bytes)) return ncclInvalidArgument;
  return enqueue([=](Posted& p) -> ncclResult_t {
#ifdef SCALELAB_EMULATED_NCCL_MPI
    if (comm->mpi != MPI_COMM_NULL)
      return post_reduction(p, type, op, [&](MPI_Op mop, MPI_Request* r) {
        const bool in_place = comm->rank == root && send == recv;
        return MPI_Ireduce(in_place ? MPI_IN_PLACE : send, recv, static_cast<int>(count), mpi_type(type), mop, root,
                           comm->mpi, r);
      });
#endif
    (void)p, (void)op;
    local_copy(recv, send, bytes);
    return ncclSuccess;
  });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t) {
  if (const ncclResult_t rc = check_comm(comm, count, type); rc != ncclSuccess) return rc;
  if (root < 0 || root >= comm->size) return ncclInvalidArgument;
  const std::size_t bytes = count * type_size(type);
  if (comm->rank == root && send != recv && overlap(send, bytes, recv, bytes)) return ncclInvalidArgument;
  return enqueue([=](Posted& p) -> ncclResult_t {
    if (comm->rank == root) local_copy(recv, send, bytes);
#ifdef SCALELAB_EMULATED_NCCL_MPI
    if (comm->mpi != MPI_COMM_NULL)
      return post(p, [&](MPI_Request* r) {
        return MPI_Ibcast(recv, static_cast<int>(count), mpi_type(type), root, comm->mpi, r);
      });
#endif
    (void)p;
    return ncclSuccess;
  });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t) {
  if (const ncclResult_t rc = check_comm(comm, recvcount * static_cast<std::size_t>(comm ? comm->size : 1), type);
      rc != ncclSuccess)
    return rc;
  const std::size_t block = recvcount * type_size(type), total = block * static_cast<std::size_t>(comm->size);
  const bool in_place = recv == static_cast<const char*>(send) + static_cast<std::size_t>(comm->rank) * block;
  if (!in_place && overlap(send, total, recv, block)) return ncclInvalidArgument;
  return enqueue([=](Posted& p) -> ncclResult_t {
#ifdef SCALELAB_EMULATED_NCCL_MPI
    if (comm->mpi != MPI_COMM_NULL)
      return post_reduction(p, type, op, [&](MPI_Op mop, MPI_Request* r) {
        // MPI's in-place reduce-scatter leaves the block at the buffer's start: read a copy instead.
        return MPI_Ireduce_scatter_block(in_place ? staged(p, send, total) : send, recv, static_cast<int>(recvcount),
                                         mpi_type(type), mop, comm->mpi, r);
      });
#endif
    (void)p, (void)op;
    local_copy(recv, send, block);
    return ncclSuccess;
  });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t) {
  if (const ncclResult_t rc = check_comm(comm, sendcount * static_cast<std::size_t>(comm ? comm->size : 1), type);
      rc != ncclSuccess)
    return rc;
  const std::size_t block = sendcount * type_size(type), total = block * static_cast<std::size_t>(comm->size);
  void* place = static_cast<char*>(recv) + static_cast<std::size_t>(comm->rank) * block;
  const bool in_place = send == place;
  if (!in_place && overlap(send, block, recv, total)) return ncclInvalidArgument;
  return enqueue([=](Posted& p) -> ncclResult_t {
#ifdef SCALELAB_EMULATED_NCCL_MPI
    if (comm->mpi != MPI_COMM_NULL)
      return post(p, [&](MPI_Request* r) {
        // MPI's in-place all-gather takes each rank's block from its place in recv: nccl.h's form.
        return MPI_Iallgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(sendcount), mpi_type(type), recv,
                              static_cast<int>(sendcount), mpi_type(type), comm->mpi, r);
      });
#endif
    (void)p;
    local_copy(place, send, block);
    return ncclSuccess;
  });
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  if (const ncclResult_t rc = check_comm(comm, count, type); rc != ncclSuccess) return rc;
  if (peer < 0 || peer >= comm->size) return ncclInvalidArgument;
  const std::size_t bytes = count * type_size(type);
  return enqueue([=](Posted& p) -> ncclResult_t {
#ifdef SCALELAB_EMULATED_NCCL_MPI
    if (comm->mpi != MPI_COMM_NULL)
      return post(p, [&](MPI_Request* r) {
        return MPI_Isend(send, static_cast<int>(count), mpi_type(type), peer, 0, comm->mpi, r);
      });
#endif
    // One rank: the message waits for its receive (in this group or a later one).
    comm->sends.push_back({const_cast<void*>(send), bytes});
    p.after.push_back([comm] { match_local(comm); });
    return ncclSuccess;
  });
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  if (const ncclResult_t rc = check_comm(comm, count, type); rc != ncclSuccess) return rc;
  if (peer < 0 || peer >= comm->size) return ncclInvalidArgument;
  const std::size_t bytes = count * type_size(type);
  return enqueue([=](Posted& p) -> ncclResult_t {
#ifdef SCALELAB_EMULATED_NCCL_MPI
    if (comm->mpi != MPI_COMM_NULL)
      return post(p, [&](MPI_Request* r) {
        return MPI_Irecv(recv, static_cast<int>(count), mpi_type(type), peer, 0, comm->mpi, r);
      });
#endif
    comm->recvs.push_back({recv, bytes});
    p.after.push_back([comm] { match_local(comm); });
    return ncclSuccess;
  });
}

}  // extern "C"
