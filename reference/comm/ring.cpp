// Ring reduce-scatter, all-gather and all-reduce over isend/irecv (lab 04a; the algorithm and
// its byte counts are in docs/stages/04-collectives.md, the handout in labs/04-data-parallel).
#include "comm/ring.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "core/error.hpp"

namespace scalelab {

namespace {

// Ring messages carry their own tags, so they never match a caller's point-to-point traffic.
constexpr int kReduceScatterTag = 4101;
constexpr int kAllGatherTag = 4102;

// [[maybe_unused]] here, on add_into and on piece_elements: only the lab regions call them, so a
// student's skeleton (labs/) would otherwise warn about unused functions.
[[maybe_unused]] int wrap(int b, int n) { return ((b % n) + n) % n; }

// One message of a ring collective: `length` elements at `offset`, received at `step`.
struct Piece {
  int step;
  std::size_t offset;
  std::size_t length;
};

// The pieces a rank receives, in the order they arrive: step by step, and within a step from
// the start of the block. block_at(s) is the block received at step s; an empty block has no
// pieces (both neighbours see the same partition, so they agree on every piece).
template <typename BlockAt>
std::vector<Piece> incoming_pieces(const Pieces& blocks, std::size_t piece_elems, BlockAt block_at) {
  std::vector<Piece> pieces;
  for (int s = 0; s < blocks.parts() - 1; ++s) {
    const int b = block_at(s);
    const std::size_t begin = blocks.offset(b), end = begin + blocks.size(b);
    for (std::size_t at = begin; at < end; at += piece_elems)
      pieces.push_back({s, at, std::min(piece_elems, end - at)});
  }
  return pieces;
}

// mine[i] += theirs[i], the one arithmetic step of a reduction. OpenMPI's own MPI_SUM picks
// AVX-512 or AVX2 code at run time; a portable build of a plain loop would get SSE2 only, and
// lose about 5% of a 1 MiB all-reduce to it. So on x86-64 the compiler builds the loop for
// several instruction sets and the loader picks the widest the CPU has (target_clones).
// Addition is element by element, so every version gives the same bits.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SCALELAB_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SCALELAB_SIMD_CLONES
#endif
template <typename T>
[[maybe_unused]] SCALELAB_SIMD_CLONES void add_into(T* __restrict mine, const T* __restrict theirs, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) mine[i] += theirs[i];
}
#undef SCALELAB_SIMD_CLONES

[[maybe_unused]] std::size_t piece_elements(const RingOptions& options, std::size_t elem_size) {
  return std::max<std::size_t>(1, options.chunk_bytes / elem_size);
}

// Counts one ring collective in the communicator's stats: a call, its time, and the bytes that
// its sends and receives moved (they also appear in the send and recv rows).
class RingScope {
 public:
  RingScope(Communicator& comm, CommOp op)
      : comm_(comm),
        op_(op),
        sent0_(comm.stats()[CommOp::kSend].bytes_sent),
        received0_(comm.stats()[CommOp::kRecv].bytes_received),
        t0_(std::chrono::steady_clock::now()) {}
  ~RingScope() {
    OpStats& row = comm_.stats()[op_];
    row.calls += 1;
    row.bytes_sent += comm_.stats()[CommOp::kSend].bytes_sent - sent0_;
    row.bytes_received += comm_.stats()[CommOp::kRecv].bytes_received - received0_;
    row.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  RingScope(const RingScope&) = delete;
  RingScope& operator=(const RingScope&) = delete;

 private:
  Communicator& comm_;
  CommOp op_;
  std::uint64_t sent0_, received0_;
  std::chrono::steady_clock::time_point t0_;
};

template <typename T>
void reduce_scatter_steps(Communicator& comm, T* data, const Pieces& blocks, const RingOptions& options) {
  // LAB 04 BEGIN ring_reduce_scatter: section 2
  const int n = comm.size(), r = comm.rank();
  if (n == 1 || blocks.count() == 0) return;
  const std::size_t piece = piece_elements(options, sizeof(T));
  const int next = wrap(r + 1, n), prev = wrap(r - 1, n);
  const DataType type = dtype_of<T>();

  // Step 0 sends our own block r-1 as it is, in pieces.
  std::vector<Request> sends;
  const int first = wrap(r - 1, n);
  const std::size_t first_end = blocks.offset(first) + blocks.size(first);
  for (std::size_t at = blocks.offset(first); at < first_end; at += piece)
    sends.push_back(comm.isend(data + at, std::min(piece, first_end - at), type, next, kReduceScatterTag));

  // Step s receives block r-2-s (a partial sum from rank r-1) into a scratch slot and adds it to
  // our copy of that block; the result is what step s+1 sends on. Pieces arrive in the order
  // they were sent, so `window` slots let receives run ahead of the adding.
  const std::vector<Piece> incoming = incoming_pieces(blocks, piece, [&](int s) { return wrap(r - 2 - s, n); });
  const std::size_t window = std::min<std::size_t>(std::max(options.window, 1), incoming.size());
  const std::size_t slot_elems = std::min(piece, blocks.largest());
  // Not zeroed (zeroing cost ~5% of a 1 MiB all-reduce): a receive fills each slot before it is read.
  const auto scratch = std::make_unique_for_overwrite<T[]>(window * slot_elems);
  std::vector<Request> recvs(window);
  const auto post = [&](std::size_t j) {
    recvs[j % window] = comm.irecv(scratch.get() + (j % window) * slot_elems, incoming[j].length, type, prev,
                                   kReduceScatterTag);
  };
  for (std::size_t j = 0; j < window; ++j) post(j);
  for (std::size_t j = 0; j < incoming.size(); ++j) {
    comm.wait(recvs[j % window]);
    const Piece& p = incoming[j];
    T* mine = data + p.offset;
    const T* theirs = scratch.get() + (j % window) * slot_elems;
    add_into(mine, theirs, p.length);
    if (p.step + 1 < n - 1) sends.push_back(comm.isend(mine, p.length, type, next, kReduceScatterTag));
    if (j + window < incoming.size()) post(j + window);  // the slot just added is free again
  }
  comm.wait_all(sends);
  // LAB 04 END
}

template <typename T>
void all_gather_steps(Communicator& comm, T* data, const Pieces& blocks, const RingOptions& options) {
  // LAB 04 BEGIN ring_all_gather: section 3
  const int n = comm.size(), r = comm.rank();
  if (n == 1 || blocks.count() == 0) return;
  const std::size_t piece = piece_elements(options, sizeof(T));
  const int next = wrap(r + 1, n), prev = wrap(r - 1, n);
  const DataType type = dtype_of<T>();

  // Step 0 sends our own block r.
  std::vector<Request> sends;
  const std::size_t own_end = blocks.offset(r) + blocks.size(r);
  for (std::size_t at = blocks.offset(r); at < own_end; at += piece)
    sends.push_back(comm.isend(data + at, std::min(piece, own_end - at), type, next, kAllGatherTag));

  // Step s receives block r-1-s straight into place and step s+1 sends it on: no copies, no
  // scratch; the window only bounds how many receives are in flight.
  const std::vector<Piece> incoming = incoming_pieces(blocks, piece, [&](int s) { return wrap(r - 1 - s, n); });
  const std::size_t window = std::min<std::size_t>(std::max(options.window, 1), incoming.size());
  std::vector<Request> recvs(window);
  const auto post = [&](std::size_t j) {
    recvs[j % window] = comm.irecv(data + incoming[j].offset, incoming[j].length, type, prev, kAllGatherTag);
  };
  for (std::size_t j = 0; j < window; ++j) post(j);
  for (std::size_t j = 0; j < incoming.size(); ++j) {
    comm.wait(recvs[j % window]);
    const Piece& p = incoming[j];
    if (p.step + 1 < n - 1) sends.push_back(comm.isend(data + p.offset, p.length, type, next, kAllGatherTag));
    if (j + window < incoming.size()) post(j + window);
  }
  comm.wait_all(sends);
  // LAB 04 END
}

}  // namespace

template <typename T>
void ring_reduce_scatter(Communicator& comm, T* data, std::size_t count, const RingOptions& options) {
  RingScope scope(comm, CommOp::kRingReduceScatter);
  reduce_scatter_steps(comm, data, Pieces::even(count, comm.size()), options);
}

template <typename T>
void ring_all_gather(Communicator& comm, T* data, std::size_t count, const RingOptions& options) {
  RingScope scope(comm, CommOp::kRingAllGather);
  all_gather_steps(comm, data, Pieces::even(count, comm.size()), options);
}

template <typename T>
void ring_reduce_scatter_v(Communicator& comm, T* data, const Pieces& pieces, const RingOptions& options) {
  SCALELAB_CHECK(pieces.parts() == comm.size(), "ring_reduce_scatter_v: ", pieces.parts(), " pieces for ", comm.size(),
                 " ranks");
  RingScope scope(comm, CommOp::kRingReduceScatter);
  reduce_scatter_steps(comm, data, pieces, options);
}

template <typename T>
void ring_all_gather_v(Communicator& comm, T* data, const Pieces& pieces, const RingOptions& options) {
  SCALELAB_CHECK(pieces.parts() == comm.size(), "ring_all_gather_v: ", pieces.parts(), " pieces for ", comm.size(),
                 " ranks");
  RingScope scope(comm, CommOp::kRingAllGather);
  all_gather_steps(comm, data, pieces, options);
}

template <typename T>
void ring_all_reduce(Communicator& comm, T* data, std::size_t count, const RingOptions& options) {
  RingScope scope(comm, CommOp::kRingAllReduce);
  // LAB 04 BEGIN ring_all_reduce: section 4
  // Reduce-scatter leaves the sum of block r on rank r, exactly where all-gather expects it.
  const Pieces blocks = Pieces::even(count, comm.size());
  reduce_scatter_steps(comm, data, blocks, options);
  all_gather_steps(comm, data, blocks, options);
  // LAB 04 END
}

#define SCALELAB_RING_DEFINE(T)                                                                 \
  template void ring_reduce_scatter<T>(Communicator&, T*, std::size_t, const RingOptions&);     \
  template void ring_all_gather<T>(Communicator&, T*, std::size_t, const RingOptions&);         \
  template void ring_all_reduce<T>(Communicator&, T*, std::size_t, const RingOptions&);         \
  template void ring_reduce_scatter_v<T>(Communicator&, T*, const Pieces&, const RingOptions&); \
  template void ring_all_gather_v<T>(Communicator&, T*, const Pieces&, const RingOptions&);
SCALELAB_RING_DEFINE(float)
SCALELAB_RING_DEFINE(double)
SCALELAB_RING_DEFINE(std::int32_t)
SCALELAB_RING_DEFINE(std::int64_t)
#undef SCALELAB_RING_DEFINE

}  // namespace scalelab
