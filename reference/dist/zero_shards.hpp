// Stage 07 (ZeRO): which part of the model's state each data-parallel rank owns, and the units
// that move between ranks.
//
// The flat buffer of psi parameters (model/params.hpp, nanoGPT order) is cut into d contiguous
// shards, rank r owning shard r of BlockPartition{psi, d}: sizes differ by at most one element,
// so no padding is needed (MPI's reduce-scatter and all-gather take uneven counts). Gradients,
// AdamW's m and v, and under stage 3 the parameters themselves mirror that cut.
//
// What travels is cut by the model's structure: the embeddings (wte, wpe), each block, ln_f.
// Those units are what backward finishes one at a time (so a unit's gradients are
// reduce-scattered as soon as it is done) and what a stage-3 forward needs one at a time (so a
// unit's parameters are gathered just before it runs). Unit u's piece for rank r is the part of
// u inside shard r: usually all of u, or nothing, since blocks are smaller than shards.
//
// Why this cut: element i is summed along the ring in the order its owner fixes (comm/ring.hpp),
// and DDP's ring all-reduce over one bucket of the whole buffer (stage 04) cuts the buffer the
// same way. So ZeRO with the ring sums every gradient exactly as DDP does: bitwise equal.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "comm/partition.hpp"
#include "model/config.hpp"
#include "model/params.hpp"

namespace scalelab {

struct ZeroUnit {
  std::string name;                // "embeddings", "block 3", "ln_f"
  int block = -1;                  // the block's number, -1 for the embeddings and ln_f
  std::size_t begin = 0, end = 0;  // [begin, end) of the flat buffer
  Pieces pieces;                   // each rank's part of it, relative to begin
  std::size_t size() const { return end - begin; }
};

class ZeroShards {
 public:
  // Rank `rank` of `ranks` for the whole model of `config`.
  ZeroShards(const GPTConfig& config, int rank, int ranks);

  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  std::size_t num_params() const { return partition_.count; }
  const BlockPartition& partition() const { return partition_; }
  // This rank's shard [begin, end) of the flat buffer.
  std::size_t begin() const { return partition_.offset(rank_); }
  std::size_t end() const { return begin() + size(); }
  std::size_t size() const { return partition_.size(rank_); }

  // In layout order: embeddings, block 0 .. L-1, ln_f.
  const std::vector<ZeroUnit>& units() const { return units_; }
  const ZeroUnit& embeddings() const { return units_.front(); }
  const ZeroUnit& block(int l) const { return units_.at(static_cast<std::size_t>(l) + 1); }
  const ZeroUnit& head() const { return units_.back(); }
  // The unit whose first element is `offset` (a grad-ready notification's), or null.
  const ZeroUnit* unit_starting_at(std::size_t offset) const;
  // This rank's piece of unit u: [begin, end) of the flat buffer (empty when it owns none).
  std::size_t piece_begin(const ZeroUnit& u) const { return u.begin + u.pieces.offset(rank_); }
  std::size_t piece_size(const ZeroUnit& u) const { return u.pieces.size(rank_); }
  // Elements of the largest unit among the blocks (a stage-3 working buffer's size).
  std::size_t largest_block() const;

 private:
  int rank_, ranks_;
  BlockPartition partition_;
  std::vector<ZeroUnit> units_;
};

// ZeRO's model state per rank for an fp32 run, in bytes (4 per element): parameters, gradients,
// AdamW's m and v, for a model of psi parameters of which this rank's shard is `shard` elements.
//   stage 0 (DDP)  4 psi + 4 psi + 8 psi      = 16 psi
//   stage 1        4 psi + 4 psi + 8 shard    =  8 psi + 8 psi/d
//   stage 2        4 psi + 4 shard + 8 shard  =  4 psi + 12 psi/d
//   stage 3        4 shard + 4 shard + 8 shard = 16 psi/d
struct ZeroStateBytes {
  std::size_t params = 0, grads = 0, optimizer = 0;
  std::size_t total() const { return params + grads + optimizer; }
};
ZeroStateBytes zero_state_bytes(int stage, std::size_t psi, std::size_t shard);
// The same in mixed precision (bf16 or fp16, stage 03): half parameters and gradients, 2 bytes
// each, and the fp32 master weights with m and v, 12 bytes per element of the shard, counted as
// optimizer state (MixedPrecisionModel's categories):
//   stage 0 (DDP)  2 psi + 2 psi + 12 psi       = 16 psi
//   stage 1        2 psi + 2 psi + 12 shard     =  4 psi + 12 psi/d
//   stage 2        2 psi + 2 shard + 12 shard   =  2 psi + 14 psi/d
//   stage 3        2 shard + 2 shard + 12 shard = 16 psi/d
ZeroStateBytes zero_mixed_state_bytes(int stage, std::size_t psi, std::size_t shard);
// Both: `per_element` bytes of each per parameter, the stage's categories counted for the shard.
ZeroStateBytes zero_state_bytes(int stage, std::size_t psi, std::size_t shard, const ZeroStateBytes& per_element);
// ZeRO-Offload (stages 1 and 2): the fp32 master shard, the gradient shard and m, v live in host
// memory, 4 + 4 + 8 bytes per element of the shard (16 psi/d); the device keeps the parameters,
// 4 psi, and under stage 1 the whole gradient, 4 psi, which backward accumulates into:
//   stage 1 + offload   device 4 psi + 4 psi       host 16 psi/d
//   stage 2 + offload   device 4 psi               host 16 psi/d
ZeroStateBytes zero_offload_device_bytes(int stage, std::size_t psi);
ZeroStateBytes zero_offload_host_bytes(std::size_t shard);

}  // namespace scalelab
