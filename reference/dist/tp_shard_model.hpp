// Stage 06: what the tensor-parallel strategy (dist/tp_strategy.hpp) and a tp x pp pipeline stage
// (dist/pipeline_stage_model.hpp) need of a rank's shard of the model, whichever precision it
// computes in: fp32 (TensorParallelModel, dist/tp_model.hpp) or mixed precision
// (MixedTensorParallelModel, dist/tp_mixed_model.hpp). Both are a TrainModel (the trainer drives
// a shard of the whole model) and a PipelineChunk (a pipeline stage runs a shard of its slice).
#pragma once

#include "comm/communicator.hpp"
#include "dist/norm_share.hpp"
#include "dist/pipeline_chunk.hpp"
#include "dist/tp_layout.hpp"
#include "dist/tp_operators.hpp"
#include "model/train_model.hpp"

namespace scalelab {

class TpShardModel : public TrainModel, public PipelineChunk {
 public:
  // Declared by both bases; one function serves both.
  const ParamLayout& layout() const override = 0;
  std::size_t num_params() const override = 0;
  void set_checkpoint_policy(const CheckpointPolicy& policy) override = 0;
  void set_attention(AttentionKind kind) override = 0;
  void init_weights(std::uint64_t seed) override = 0;
  std::size_t block_forward_count() const override = 0;

  // Which part of every tensor this rank holds.
  virtual const TpLayout& shard() const = 0;
  // The tensor-parallel group, with the ledger of its collectives.
  virtual TpGroup& group() = 0;
  // After the step's last backward: under sequence parallelism, the replicated tensors'
  // gradients summed over the group (nothing without it).
  virtual void finish_gradients() = 0;
  // What this rank leaves out of its share of the gradient norm (dist/norm_share.hpp): on tp ranks
  // other than 0 the replicated tensors, equal on every rank once finish_gradients ran and counted
  // on rank 0. The split tensors count on every rank; the shares summed over the group are the
  // whole model's.
  virtual const IndexRanges& counted_elsewhere() const = 0;
  // Every rank of `group` (the shard's data-parallel replicas) gets `root`'s parameters.
  virtual void broadcast_params(Communicator& group, int root) = 0;
  // A shard computing on a device (dist/device_tp_shard.hpp): the device's memory, apart from the
  // host's; null for a CPU shard.
  virtual const MemoryTracker* device_memory() const { return nullptr; }
};

}  // namespace scalelab
