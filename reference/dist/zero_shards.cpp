// ZeRO's shards and units (see zero_shards.hpp).
#include "dist/zero_shards.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace scalelab {

ZeroShards::ZeroShards(const GPTConfig& config, int rank, int ranks) : rank_(rank), ranks_(ranks) {
  require(ranks >= 1 && rank >= 0 && rank < ranks, "zero",
          "rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " data-parallel ranks",
          "start the run through scalelab train under mpirun");
  const ParamLayout layout(config);
  partition_ = BlockPartition{layout.num_params(), ranks};
  const std::size_t lnf = layout.find("transformer.ln_f.weight").offset;
  auto add = [&](std::string name, int block, std::size_t begin, std::size_t end) {
    units_.push_back({std::move(name), block, begin, end, Pieces::of_range(partition_, begin, end)});
  };
  std::size_t at = layout.find("transformer.h.0.ln_1.weight").offset;
  add("embeddings", -1, 0, at);
  for (int l = 0; l < config.num_layers; ++l) {
    const std::size_t next = l + 1 < config.num_layers
                                 ? layout.find("transformer.h." + std::to_string(l + 1) + ".ln_1.weight").offset
                                 : lnf;
    add("block " + std::to_string(l), l, at, next);
    at = next;
  }
  add("ln_f", -1, lnf, layout.num_params());
  // Every piece must lie inside its rank's shard: the reduce-scatter delivers piece r to rank r,
  // which adds it into its shard, and the all-gather sends it from there. A cut that disagrees
  // with the shards would write outside them; stop here instead, naming the unit.
  for (const ZeroUnit& u : units_) {
    SCALELAB_CHECK(u.pieces.parts() == ranks && u.pieces.count() == u.size(), "the pieces of ", u.name, " cover ",
                   u.pieces.count(), " elements in ", u.pieces.parts(), " parts; the unit has ", u.size(), " over ",
                   ranks, " ranks (Pieces::of_range)");
    for (int r = 0; r < ranks; ++r) {
      const std::size_t begin = u.begin + u.pieces.offset(r), end = begin + u.pieces.size(r);
      const std::size_t shard_begin = partition_.offset(r), shard_end = shard_begin + partition_.size(r);
      SCALELAB_CHECK(begin == end || (shard_begin <= begin && end <= shard_end), "rank ", r, "'s piece of ", u.name,
                     " is [", begin, ", ", end, ") of the flat buffer, outside its shard [", shard_begin, ", ",
                     shard_end, ") (Pieces::of_range)");
    }
  }
}

const ZeroUnit* ZeroShards::unit_starting_at(std::size_t offset) const {
  for (const ZeroUnit& u : units_)
    if (u.begin == offset) return &u;
  return nullptr;
}

std::size_t ZeroShards::largest_block() const {
  std::size_t m = 0;
  for (const ZeroUnit& u : units_)
    if (u.block >= 0) m = std::max(m, u.size());
  return m;
}

ZeroStateBytes zero_state_bytes(int stage, std::size_t psi, std::size_t shard) {
  return zero_state_bytes(stage, psi, shard, {sizeof(float), sizeof(float), 2 * sizeof(float)});
}

ZeroStateBytes zero_mixed_state_bytes(int stage, std::size_t psi, std::size_t shard) {
  // half parameters and gradients (bf16 or fp16); the fp32 master weights, m and v
  return zero_state_bytes(stage, psi, shard, {2, 2, 3 * sizeof(float)});
}

ZeroStateBytes zero_state_bytes(int stage, std::size_t psi, std::size_t shard, const ZeroStateBytes& per_element) {
  ZeroStateBytes b;
  b.params = per_element.params * (stage >= 3 ? shard : psi);
  b.grads = per_element.grads * (stage >= 2 ? shard : psi);
  b.optimizer = per_element.optimizer * (stage >= 1 ? shard : psi);
  return b;
}

ZeroStateBytes zero_offload_device_bytes(int stage, std::size_t psi) {
  const std::size_t f = sizeof(float);
  ZeroStateBytes b;
  b.params = f * psi;
  b.grads = stage == 1 ? f * psi : 0;
  return b;
}

ZeroStateBytes zero_offload_host_bytes(std::size_t shard) {
  const std::size_t f = sizeof(float);
  return {f * shard, f * shard, 2 * f * shard};
}

}  // namespace scalelab
