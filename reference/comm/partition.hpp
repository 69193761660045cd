// How the collectives cut a buffer of `count` elements into one block per rank (stage 04).
// Block b holds count/n elements, plus one for the first count%n blocks, so any count works
// (also count < n: some blocks are then empty) and block sizes differ by at most one element.
// Reduce-scatter leaves rank r with block r; all-gather starts from it. The ring, the MPI
// backend and the one-rank backend all use this partition, so their results line up.
#pragma once

#include <cstddef>

namespace scalelab {

struct BlockPartition {
  std::size_t count = 0;  // elements in the whole buffer
  int parts = 1;          // ranks

  std::size_t size(int b) const {
    const std::size_t n = static_cast<std::size_t>(parts), i = static_cast<std::size_t>(b);
    return count / n + (i < count % n ? 1 : 0);
  }
  // Elements before block b: b full-size blocks plus one extra for each of the first count%n.
  std::size_t offset(int b) const {
    const std::size_t n = static_cast<std::size_t>(parts), i = static_cast<std::size_t>(b);
    const std::size_t extra = count % n;
    return i * (count / n) + (i < extra ? i : extra);
  }
};

// Elements a rank sends (and receives) in the ring collectives of docs/stages/04-collectives.md,
// exactly, for any count. They reduce to the textbook volumes when n divides count:
//   reduce-scatter and all-gather (n-1)/n * count, all-reduce 2(n-1)/n * count.
// The communicators count their built-in collectives with these volumes too, so a backend's
// byte counters say what a bandwidth-optimal algorithm must move, whatever the library does.
struct RingTraffic {
  std::size_t sent = 0;      // elements
  std::size_t received = 0;  // elements
};
// Reduce-scatter: rank r sends every block but its own (r) and receives every block but r-1's.
RingTraffic ring_reduce_scatter_traffic(std::size_t count, int rank, int ranks);
// All-gather: rank r sends every block but r+1's and receives every block but its own.
RingTraffic ring_all_gather_traffic(std::size_t count, int rank, int ranks);
// All-reduce: a reduce-scatter followed by an all-gather.
RingTraffic ring_all_reduce_traffic(std::size_t count, int rank, int ranks);

}  // namespace scalelab
