// How the collectives cut a buffer of `count` elements into one block per rank (stage 04).
// Block b holds count/n elements, plus one for the first count%n blocks, so any count works
// (also count < n: some blocks are then empty) and block sizes differ by at most one element.
// Reduce-scatter leaves rank r with block r; all-gather starts from it. The ring, the MPI
// backend and the one-rank backend all use this partition, so their results line up.
#pragma once

#include <cstddef>
#include <vector>

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

// One piece per rank of a buffer, of any sizes (some may be empty): piece b is
// [offset(b), offset(b) + size(b)). The even cut of BlockPartition is one case; ZeRO (stage 07)
// cuts each block of the model where the ranks' shards of the whole flat buffer cut it, so a
// block's piece r is the part of it that rank r owns (often all of it, or nothing).
class Pieces {
 public:
  // The even cut: BlockPartition{count, parts}.
  static Pieces even(std::size_t count, int parts);
  // The part of [begin, end) that each block of `shards` covers, offsets relative to begin.
  static Pieces of_range(const BlockPartition& shards, std::size_t begin, std::size_t end);

  int parts() const { return static_cast<int>(bounds_.size()) - 1; }
  std::size_t count() const { return bounds_.back(); }
  std::size_t offset(int b) const { return bounds_[static_cast<std::size_t>(b)]; }
  std::size_t size(int b) const { return bounds_[static_cast<std::size_t>(b) + 1] - offset(b); }
  std::size_t largest() const;

 private:
  std::vector<std::size_t> bounds_{0};  // parts + 1 ascending offsets; bounds_[0] = 0
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
// The same for uneven pieces: still "every piece but one", whatever the sizes.
RingTraffic ring_reduce_scatter_traffic(const Pieces& pieces, int rank);
RingTraffic ring_all_gather_traffic(const Pieces& pieces, int rank);

}  // namespace scalelab
