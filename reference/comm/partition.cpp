// Exact per-rank traffic of the ring collectives (see partition.hpp).
#include "comm/partition.hpp"

#include <algorithm>

namespace scalelab {

namespace {
int wrap(int b, int n) { return ((b % n) + n) % n; }
}  // namespace

Pieces Pieces::even(std::size_t count, int parts) {
  const BlockPartition p{count, parts};
  Pieces out;
  for (int b = 0; b < parts; ++b) out.bounds_.push_back(p.offset(b) + p.size(b));
  return out;
}

Pieces Pieces::of_range(const BlockPartition& shards, std::size_t begin, std::size_t end) {
  Pieces out;
  // LAB 07 BEGIN Pieces::of_range: section 2
  for (int b = 0; b < shards.parts; ++b) {
    const std::size_t shard_end = shards.offset(b) + shards.size(b);
    out.bounds_.push_back(std::clamp(shard_end, begin, end) - begin);
  }
  // LAB 07 END
  return out;
}

std::size_t Pieces::largest() const {
  std::size_t m = 0;
  for (int b = 0; b < parts(); ++b) m = std::max(m, size(b));
  return m;
}

RingTraffic ring_reduce_scatter_traffic(const Pieces& p, int rank) {
  if (p.parts() <= 1) return {};
  return {p.count() - p.size(rank), p.count() - p.size(wrap(rank - 1, p.parts()))};
}

RingTraffic ring_all_gather_traffic(const Pieces& p, int rank) {
  if (p.parts() <= 1) return {};
  return {p.count() - p.size(wrap(rank + 1, p.parts())), p.count() - p.size(rank)};
}

RingTraffic ring_reduce_scatter_traffic(std::size_t count, int rank, int ranks) {
  return ring_reduce_scatter_traffic(Pieces::even(count, ranks), rank);
}

RingTraffic ring_all_gather_traffic(std::size_t count, int rank, int ranks) {
  return ring_all_gather_traffic(Pieces::even(count, ranks), rank);
}

RingTraffic ring_all_reduce_traffic(std::size_t count, int rank, int ranks) {
  const RingTraffic rs = ring_reduce_scatter_traffic(count, rank, ranks);
  const RingTraffic ag = ring_all_gather_traffic(count, rank, ranks);
  return {rs.sent + ag.sent, rs.received + ag.received};
}

}  // namespace scalelab
