// ZeRO-1 inside a model-parallel layout: Megatron-LM's "distributed optimizer". A pipeline stage
// (05) or a tensor-parallel shard (06) is one flat buffer of n parameters on each of its d
// data-parallel replicas. Without this class every replica keeps AdamW's m and v for all n and
// all-reduces the gradients; with it, replica r keeps m and v for its shard of the buffer only
// (BlockPartition{n, d}, the collectives' own cut, as stage 07's), and a step becomes
//
//   reduce-scatter the gradients over dp   (each replica gets the sum of its shard: n (d-1)/d sent)
//   norm: each shard's sum of squares, added over dp, then over the model group (pp or tp)
//   AdamW on the shard
//   all-gather the parameters over dp      (every replica gets every shard: n (d-1)/d sent)
//
// which moves the same bytes as the all-reduce it replaces (a ring all-reduce is exactly a
// reduce-scatter then an all-gather), and saves 8 n (d-1)/d bytes of optimizer state per rank:
// per rank 4 n + 4 n + 8 n/d instead of 16 n (ZeRO stage 1 for this rank's part of the model).
// ZeRO-2 and -3 are not offered with a pipeline (dist/../parallel/strategy_factory.cpp says why).
//
// In mixed precision (stage 03; a pipeline stage of mixed-precision chunks) the buffers are half,
// and the rank keeps the fp32 master weights of its shard only (the stage allocates just those):
// the gradients are reduce-scattered and the parameters all-gathered in half, and the step is
// stage 03's on the shard: per rank 2 n + 2 n + 12 n/d bytes, the ZeRO paper's stage 1 in mixed
// precision (Megatron-LM's distributed optimizer, here with half gradients).
//
// The class wraps the rank's model as a TrainModel, so the trainer sizes its AdamW from
// num_params() (the shard) and checkpoints master_params() (the shard), as for ZeroModel; the
// strategy that built it runs the inner model (its executor, its collectives) and calls
// reduce_gradients() and step() at the seam's points.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/memory.hpp"
#include "dist/norm_share.hpp"
#include "io/checkpoint.hpp"
#include "model/train_model.hpp"
#include "precision/half.hpp"

namespace scalelab {

class DistributedOptimizer final : public TrainModel {
 public:
  // inner: this rank's part of the model; params and grads: its flat buffers of
  // inner->num_params() elements. dp: the data-parallel group (outlives this object).
  DistributedOptimizer(std::unique_ptr<TrainModel> inner, float* params, float* grads, Communicator& dp,
                       MemoryTracker* tracker);
  // Mixed precision: the half flat buffers, and master, this rank's shard of the fp32 master
  // weights (shard_size() values, kept by the inner model).
  struct HalfBuffers {
    std::uint16_t* params;
    std::uint16_t* grads;
    float* master;
    HalfFormat format;
  };
  DistributedOptimizer(std::unique_ptr<TrainModel> inner, const HalfBuffers& half, Communicator& dp,
                       MemoryTracker* tracker);

  TrainModel& inner() { return *inner_; }
  const TrainModel& inner() const { return *inner_; }
  // This rank's shard [begin, begin + size) of the inner model's flat buffer.
  std::size_t shard_begin() const { return partition_.offset(dp_.rank()); }
  std::size_t shard_size() const { return partition_.size(dp_.rank()); }

  // After the step's last backward: this rank's shard of the gradients becomes the sum over the
  // data-parallel group (the rest of the buffer is left as it was and not read again).
  void reduce_gradients();
  // The step: grad_scale, then the norm (the shard's squares without the ranges another rank
  // counts, dist/norm_share.hpp, added over dp and then over model_group when given), skip on
  // inf/NaN, clip, AdamW on the shard, all-gather.
  StepOutcome step(AdamW& optimizer, double lr, double grad_scale, double clip, const IndexRanges& counted_elsewhere,
                   Communicator* model_group);
  // Bytes this rank sent in the last step's all-gather of the parameters (0 for a skipped step).
  std::uint64_t gathered_bytes() const { return gathered_bytes_; }
  // Every replica's shard of a checkpoint's params, m and v, put together (collective over dp):
  // this rank's part of the model, whole, as the model without the distributed optimizer holds it.
  TrainCheckpoint gather(const TrainCheckpoint& mine);
  // This rank's shard of values of the inner model's size.
  std::vector<float> shard_of(const std::vector<float>& inner_values) const;
  // The inner model's parameters in fp32 (collective over dp): its buffer, or in mixed precision
  // every replica's master shard put together.
  std::vector<float> gathered_params();

  const GPTConfig& config() const override { return inner_->config(); }
  const ParamLayout& layout() const override { return inner_->layout(); }
  std::size_t num_params() const override { return shard_size(); }
  double forward(const int* tokens, const int* targets, int B, int T) override {
    return inner_->forward(tokens, targets, B, T);
  }
  void backward(double loss_scale) override { inner_->backward(loss_scale); }
  void zero_grad() override { inner_->zero_grad(); }
  void set_checkpoint_policy(const CheckpointPolicy& policy) override { inner_->set_checkpoint_policy(policy); }
  void set_attention(AttentionKind kind) override { inner_->set_attention(kind); }
  void init_weights(std::uint64_t seed) override { inner_->init_weights(seed); }
  // The shard (shard_size() values): of the parameters, or of the master weights.
  const float* master_params() const override { return half_ ? half_->master : params_ + shard_begin(); }
  // Collective over dp: sets this rank's shard and all-gathers the buffer.
  void set_master_params(const float* values) override;
  // Every tensor counted once on this rank: for a model that is not split further.
  StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) override;
  float* fp32_grads() override { return grads_; }  // null in mixed precision
  GradBuffer typed_grads() override { return inner_->typed_grads(); }
  std::size_t block_forward_count() const override { return inner_->block_forward_count(); }
  std::string precision_name() const override { return inner_->precision_name(); }

 private:
  void all_gather_params();
  DataType type() const;
  StepOutcome mixed_step(AdamW& optimizer, double lr, double grad_scale, double clip, const IndexRanges& skip,
                         const std::function<double(double)>& total);

  std::unique_ptr<TrainModel> inner_;
  float* params_ = nullptr;  // fp32
  float* grads_ = nullptr;
  std::optional<HalfBuffers> half_;  // mixed precision
  Communicator& dp_;
  BlockPartition partition_;
  // The reduce-scatter's receive buffer (the shard's size; it may not overlap the send).
  Buffer<float> reduced_;
  Buffer<std::uint16_t> reduced_half_;
  Buffer<float> step_chunk_;  // mixed precision: the step's fp32 gradient chunk (workspace)
  std::uint64_t gathered_bytes_ = 0;
};

// After the step's last backward, the data-parallel replicas' gradients (n elements at grads):
// all-reduced, or with the distributed optimizer (zero not null) reduce-scattered into each
// replica's shard. Nothing with one replica and no distributed optimizer.
void reduce_over_replicas(DistributedOptimizer* zero, Communicator& dp, TrainModel::GradBuffer grads, std::size_t n);

}  // namespace scalelab
