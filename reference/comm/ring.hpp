// Hand-written ring collectives over any Communicator's send/recv (stage 04, lab 04a).
//
// n ranks stand in a ring; each sends only to rank+1 and receives only from rank-1. The buffer
// is cut into n blocks (BlockPartition: any count, sizes differ by at most one element).
//   reduce-scatter  n-1 steps; at step s rank r sends block r-1-s and adds the block r-2-s
//                   that arrives to its own copy. Afterwards block r holds the sum over ranks.
//   all-gather      n-1 steps; at step s rank r sends block r-s and receives block r-1-s
//                   straight into place. Afterwards every block is everywhere.
//   all-reduce      reduce-scatter, then all-gather: 2(n-1)/n * S bytes out of every rank,
//                   the minimum any algorithm needs, whatever n is.
// Each block travels in pieces of at most chunk_bytes, with `window` receives posted ahead,
// so sending, receiving and adding overlap, and a piece is added while still in cache.
//
// All three work in place on `data` (count elements, host memory) and only sum. The order of
// every float addition is fixed by n alone (block b is summed along the ring starting at rank
// b+1), so results are deterministic run to run, though not equal to another algorithm's in
// the last bits. docs/stages/04-collectives.md derives the steps and the byte counts.
#pragma once

#include <cstddef>

#include "comm/communicator.hpp"

namespace scalelab {

struct RingOptions {
  std::size_t chunk_bytes = std::size_t(256) << 10;  // largest message; also the unit of adding
  int window = 4;                                    // receives in flight ahead of the one being added
};

// On return, data's block r (partition.offset(r), partition.size(r)) holds the sum over all
// ranks of block r; the other blocks hold partial sums (scratch).
template <typename T>
void ring_reduce_scatter(Communicator& comm, T* data, std::size_t count, const RingOptions& options = {});
// On entry, data's block r holds this rank's block; on return every block is filled.
template <typename T>
void ring_all_gather(Communicator& comm, T* data, std::size_t count, const RingOptions& options = {});
// On return, data holds the elementwise sum over all ranks.
template <typename T>
void ring_all_reduce(Communicator& comm, T* data, std::size_t count, const RingOptions& options = {});
// The same two over uneven pieces (comm/partition.hpp): data holds pieces.count() elements and
// rank r's piece is pieces' block r; empty pieces are skipped. ZeRO (stage 07) reduce-scatters
// and gathers each block of the model where the ranks' shards cut it.
template <typename T>
void ring_reduce_scatter_v(Communicator& comm, T* data, const Pieces& pieces, const RingOptions& options = {});
template <typename T>
void ring_all_gather_v(Communicator& comm, T* data, const Pieces& pieces, const RingOptions& options = {});

#define SCALELAB_RING_DECLARE(T)                                                                       \
  extern template void ring_reduce_scatter<T>(Communicator&, T*, std::size_t, const RingOptions&);     \
  extern template void ring_all_gather<T>(Communicator&, T*, std::size_t, const RingOptions&);         \
  extern template void ring_all_reduce<T>(Communicator&, T*, std::size_t, const RingOptions&);         \
  extern template void ring_reduce_scatter_v<T>(Communicator&, T*, const Pieces&, const RingOptions&); \
  extern template void ring_all_gather_v<T>(Communicator&, T*, const Pieces&, const RingOptions&);
SCALELAB_RING_DECLARE(float)
SCALELAB_RING_DECLARE(double)
SCALELAB_RING_DECLARE(std::int32_t)
SCALELAB_RING_DECLARE(std::int64_t)
#undef SCALELAB_RING_DECLARE

}  // namespace scalelab
