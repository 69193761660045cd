// A pipeline rank's model chunks over one flat buffer (stage 05).
#include "dist/pipeline_stage_model.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "train/fp32_model.hpp"

namespace scalelab {

ModelSlice pipeline_stage_slice(const GPTConfig& config, int stage, int stages) {
  const int L = config.num_layers;
  require(stages <= L, "pp",
          std::to_string(stages) +
              " model stages (--pp x model chunks) need at least as many layers, and the model "
              "has " +
              std::to_string(L),
          "use at most " + std::to_string(L) + " model stages, or a deeper config");
  SCALELAB_CHECK(stage >= 0 && stage < stages, "model stage ", stage, " of ", stages);
  const int base = L / stages, extra = L % stages;
  const int first = stage * base + std::min(stage, extra);
  const int count = base + (stage < extra ? 1 : 0);
  return ModelSlice::layers(config, first, count);
}

namespace {

std::vector<ParamLayout> chunk_layouts(const GPTConfig& config, const PipelineShape& shape, int rank) {
  std::vector<ParamLayout> layouts;
  for (int c = 0; c < shape.chunks; ++c)
    layouts.emplace_back(config, pipeline_stage_slice(config, model_stage(shape, rank, c), shape.model_stages()));
  return layouts;
}

}  // namespace

PipelineStageModel::PipelineStageModel(const GPTConfig& config, const PipelineShape& shape, int rank,
                                       MemoryTracker* tracker)
    : config_(config),
      layout_(ParamLayout::concatenate(chunk_layouts(config, shape, rank))),
      params_(layout_.num_params(), MemCategory::kParams, tracker),
      grads_(layout_.num_params(), MemCategory::kGrads, tracker) {
  std::size_t offset = 0;
  for (int c = 0; c < shape.chunks; ++c) {
    const ModelSlice slice = pipeline_stage_slice(config, model_stage(shape, rank, c), shape.model_stages());
    chunks_.push_back(std::make_unique<GPT>(config, tracker, slice, params_.data() + offset, grads_.data() + offset));
    offset += chunks_.back()->num_params();
  }
}

std::size_t PipelineStageModel::wte_numel() const {
  return static_cast<std::size_t>(config_.vocab_size) * config_.channels;
}

std::size_t PipelineStageModel::stashed_count() const {
  std::size_t n = 0;
  for (const auto& c : chunks_) n += c->stashed_count();
  return n;
}

namespace {
[[noreturn]] void refuse_alone() {
  throw ConfigError(
      "pipeline: a pipeline stage holds only some blocks and runs through the pipeline executor; "
      "train it with scalelab train --pp P under mpirun");
}
}  // namespace

double PipelineStageModel::forward(const int*, const int*, int, int) { refuse_alone(); }

void PipelineStageModel::backward(double) { refuse_alone(); }

void PipelineStageModel::zero_grad() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void PipelineStageModel::set_checkpoint_policy(const CheckpointPolicy& policy) {
  for (auto& c : chunks_) c->set_checkpoint_policy(policy);
}

void PipelineStageModel::set_attention(AttentionKind kind) {
  for (auto& c : chunks_) c->set_attention(kind);
}

void PipelineStageModel::init_weights(std::uint64_t seed) {
  for (auto& c : chunks_) c->init_weights(seed);  // each tensor as the whole model's initialisation gives it
}

void PipelineStageModel::set_master_params(const float* values) {
  std::copy(values, values + num_params(), params_.data());
}

TrainModel::StepOutcome PipelineStageModel::optimizer_step(AdamW& optimizer, double lr, double grad_scale,
                                                           double clip) {
  return fp32_optimizer_step(optimizer, params_.data(), grads_.data(), num_params(), lr, grad_scale, clip);
}

std::size_t PipelineStageModel::block_forward_count() const {
  std::size_t n = 0;
  for (const auto& c : chunks_) n += c->block_forward_count();
  return n;
}

}  // namespace scalelab
