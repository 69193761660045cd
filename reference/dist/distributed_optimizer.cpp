// ZeRO-1 over the data-parallel group for a pipeline stage or a tensor-parallel shard (the
// distributed optimizer of issue 15's compositions).
#include "dist/distributed_optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "precision/half_type.hpp"
#include "precision/mixed_model.hpp"
#include "train/fp32_model.hpp"

namespace scalelab {

DistributedOptimizer::DistributedOptimizer(std::unique_ptr<TrainModel> inner, float* params, float* grads,
                                           Communicator& dp, MemoryTracker* tracker)
    : inner_(std::move(inner)),
      params_(params),
      grads_(grads),
      dp_(dp),
      partition_(dp.partition(inner_->num_params())),
      reduced_(partition_.size(dp.rank()), MemCategory::kComm, tracker) {}

DistributedOptimizer::DistributedOptimizer(std::unique_ptr<TrainModel> inner, const HalfBuffers& half, Communicator& dp,
                                           MemoryTracker* tracker)
    : inner_(std::move(inner)),
      half_(half),
      dp_(dp),
      partition_(dp.partition(inner_->num_params())),
      reduced_half_(partition_.size(dp.rank()), MemCategory::kComm, tracker),
      step_chunk_(std::min<std::size_t>(std::max<std::size_t>(partition_.size(dp.rank()), 1), 1 << 16),
                  MemCategory::kWorkspace, tracker) {}

DataType DistributedOptimizer::type() const {
  if (!half_) return DataType::kFloat32;
  return half_data_type(half_->format);
}

void DistributedOptimizer::reduce_gradients() {
  // The send is the whole buffer, the receive this rank's shard of the sum: the two may not
  // overlap (MPI's rule), so the sum lands in reduced_ and is copied into place.
  if (half_) {
    dp_.reduce_scatter(half_->grads, reduced_half_.data(), partition_.count, type(), ReduceOp::kSum);
    std::copy(reduced_half_.begin(), reduced_half_.end(), half_->grads + shard_begin());
    return;
  }
  dp_.reduce_scatter(grads_, reduced_.data(), partition_.count, DataType::kFloat32, ReduceOp::kSum);
  std::copy(reduced_.begin(), reduced_.end(), grads_ + shard_begin());
}

void DistributedOptimizer::all_gather_params() {
  // Each rank's shard sits at its own offset of the buffer, so the gather works in place.
  if (half_)
    dp_.all_gather(half_->params + shard_begin(), half_->params, partition_.count, type());
  else
    dp_.all_gather(params_ + shard_begin(), params_, partition_.count, DataType::kFloat32);
}

TrainModel::StepOutcome DistributedOptimizer::step(AdamW& optimizer, double lr, double grad_scale, double clip,
                                                   const IndexRanges& counted_elsewhere, Communicator* model_group) {
  const std::size_t begin = shard_begin(), end = begin + shard_size();
  // The shards of one replica's buffer partition it, so their sums add up to the buffer's; the
  // model group then adds the other stages' or shards' parts of the model.
  const auto total = [&](double s) {
    dp_.all_reduce(&s, 1);
    if (model_group) model_group->all_reduce(&s, 1);
    return s;
  };
  StepOutcome out;
  if (half_) {
    out = mixed_step(optimizer, lr, grad_scale, clip, counted_elsewhere, total);
  } else {
    const GradNormFn norm_of = [&](const float* /*shard*/, std::size_t /*n*/) {
      return std::sqrt(total(sum_squares_skipping(grads_, begin, end, counted_elsewhere)));
    };
    out = fp32_optimizer_step(optimizer, params_ + begin, grads_ + begin, end - begin, lr, grad_scale, clip, norm_of);
  }
  // Skipped alike on every rank (the norm is the same everywhere): nothing changed to gather.
  const std::uint64_t before = dp_.stats()[CommOp::kAllGather].bytes_sent;
  if (!out.skipped) all_gather_params();
  gathered_bytes_ = dp_.stats()[CommOp::kAllGather].bytes_sent - before;
  return out;
}

TrainModel::StepOutcome DistributedOptimizer::optimizer_step(AdamW& optimizer, double lr, double grad_scale,
                                                             double clip) {
  return step(optimizer, lr, grad_scale, clip, IndexRanges{}, nullptr);
}

TrainModel::StepOutcome DistributedOptimizer::mixed_step(AdamW& optimizer, double lr, double grad_scale, double clip,
                                                         const IndexRanges& skip,
                                                         const std::function<double(double)>& total) {
  // Stage 03's step on the shard: its half gradients unscaled chunk by chunk, the norm of the
  // whole model (the chunk's elements at their place in the buffer, for the ranges to skip),
  // AdamW on the master shard, rounded into the shard of the half parameters.
  const std::size_t begin = shard_begin();
  MixedNorm norm;
  norm.share = [&](const float* g, std::size_t offset, std::size_t count) {
    return sum_squares_skipping_at(g, begin + offset, begin + offset + count, skip);
  };
  norm.total = total;
  const MixedStepBuffers shard{half_->master, half_->params + begin, half_->grads + begin, shard_size(),
                               half_->format, step_chunk_.data(),    step_chunk_.size()};
  return mixed_optimizer_step(optimizer, shard, lr, grad_scale, clip, norm);
}

void DistributedOptimizer::set_master_params(const float* values) {
  if (half_) {
    std::copy(values, values + shard_size(), half_->master);
    float_to_half(half_->params + shard_begin(), half_->master, shard_size(), half_->format);
  } else {
    std::copy(values, values + shard_size(), params_ + shard_begin());
  }
  all_gather_params();
}

std::vector<float> DistributedOptimizer::gathered_params() {
  std::vector<float> whole(partition_.count);
  if (!half_) {
    std::copy(params_, params_ + partition_.count, whole.begin());
    return whole;
  }
  std::copy(half_->master, half_->master + shard_size(), whole.begin() + static_cast<std::ptrdiff_t>(shard_begin()));
  dp_.all_gather(whole.data() + shard_begin(), whole.data(), partition_.count, DataType::kFloat32);
  return whole;
}

TrainCheckpoint DistributedOptimizer::gather(const TrainCheckpoint& mine) {
  SCALELAB_CHECK(mine.params.size() == shard_size(), "a distributed optimizer's checkpoint holds its shard");
  TrainCheckpoint whole = mine;
  for (auto [from, to] : {std::pair{&mine.params, &whole.params}, std::pair{&mine.adam_m, &whole.adam_m},
                          std::pair{&mine.adam_v, &whole.adam_v}}) {
    to->assign(partition_.count, 0.0f);
    std::copy(from->begin(), from->end(), to->begin() + static_cast<std::ptrdiff_t>(shard_begin()));
    dp_.all_gather(to->data() + shard_begin(), to->data(), partition_.count, DataType::kFloat32);
  }
  return whole;
}

void reduce_over_replicas(DistributedOptimizer* zero, Communicator& dp, TrainModel::GradBuffer grads, std::size_t n) {
  if (zero)
    zero->reduce_gradients();
  else if (dp.size() > 1)
    dp.all_reduce(grads.data, grads.data, n, grads.type, ReduceOp::kSum);
}

std::vector<float> DistributedOptimizer::shard_of(const std::vector<float>& inner_values) const {
  SCALELAB_CHECK(inner_values.size() == partition_.count, "shard_of: ", inner_values.size(), " values, expected ",
                 partition_.count);
  const auto first = inner_values.begin() + static_cast<std::ptrdiff_t>(shard_begin());
  return std::vector<float>(first, first + static_cast<std::ptrdiff_t>(shard_size()));
}

}  // namespace scalelab
