// Exact per-rank traffic of the ring collectives (see partition.hpp).
#include "comm/partition.hpp"

namespace scalelab {

namespace {
int wrap(int b, int n) { return ((b % n) + n) % n; }
}  // namespace

RingTraffic ring_reduce_scatter_traffic(std::size_t count, int rank, int ranks) {
  if (ranks <= 1) return {};
  const BlockPartition p{count, ranks};
  return {count - p.size(rank), count - p.size(wrap(rank - 1, ranks))};
}

RingTraffic ring_all_gather_traffic(std::size_t count, int rank, int ranks) {
  if (ranks <= 1) return {};
  const BlockPartition p{count, ranks};
  return {count - p.size(wrap(rank + 1, ranks)), count - p.size(rank)};
}

RingTraffic ring_all_reduce_traffic(std::size_t count, int rank, int ranks) {
  const RingTraffic rs = ring_reduce_scatter_traffic(count, rank, ranks);
  const RingTraffic ag = ring_all_gather_traffic(count, rank, ranks);
  return {rs.sent + ag.sent, rs.received + ag.received};
}

}  // namespace scalelab
