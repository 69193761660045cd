// Stage 05: what one pipeline rank holds. The GPT's L blocks are cut into S = p * v model
// stages of contiguous blocks (the embeddings with model stage 0, ln_f and the LM head with
// model stage S - 1); rank r holds model stages r, r + p, ... (v chunks, v = 1 except for the
// interleaved schedule). Its chunks are GPT slices (model/slice.hpp) over one flat parameter
// buffer and one flat gradient buffer, so the optimizer, the data-parallel all-reduce and the
// files see one range, as for the whole model.
//
// Uneven depths: model stage s gets floor(L / S) blocks, plus one when s < L mod S (the extra
// blocks go to the early stages, because the last one also runs the LM head, the biggest
// product of the model).
#pragma once

#include <memory>
#include <vector>

#include "model/gpt.hpp"
#include "model/train_model.hpp"
#include "schedule/pipeline_schedule.hpp"

namespace scalelab {

// The blocks, embeddings and head of model stage `stage` of `stages`. Throws ConfigError when
// there are more model stages than blocks.
ModelSlice pipeline_stage_slice(const GPTConfig& config, int stage, int stages);

class PipelineStageModel final : public TrainModel {
 public:
  // Rank `rank`'s chunks of the pipeline `shape` (p ranks x v chunks).
  PipelineStageModel(const GPTConfig& config, const PipelineShape& shape, int rank, MemoryTracker* tracker);

  int chunk_count() const { return static_cast<int>(chunks_.size()); }
  GPT& chunk(int c) { return *chunks_.at(c); }
  const GPT& chunk(int c) const { return *chunks_.at(c); }
  // Whether this rank holds model stage 0 (the embeddings) and model stage S-1 (the head, with
  // its own copy of the tied wte).
  bool holds_embeddings() const { return chunks_.front()->slice().embeddings; }
  bool holds_head() const { return chunks_.back()->slice().head; }
  // Where this rank's copy of the tied wte (V*C values) starts in the flat buffers: model stage
  // 0's embedding or the last model stage's LM head (with p >= 2 a rank holds at most one, the
  // layouts' names being unique). Throws ConfigError on a rank that holds neither.
  std::size_t wte_offset() const { return layout_.find("transformer.wte.weight").offset; }
  std::size_t wte_numel() const;
  // Activations stashed over every chunk (micro-batches in flight).
  std::size_t stashed_count() const;

  const GPTConfig& config() const override { return config_; }
  const ParamLayout& layout() const override { return layout_; }
  std::size_t num_params() const override { return layout_.num_params(); }
  // A stage cannot run alone: the pipeline executor (dist/pipeline_executor.hpp) drives its
  // chunks. These throw ConfigError saying so.
  double forward(const int* tokens, const int* targets, int B, int T) override;
  void backward(double loss_scale) override;
  void zero_grad() override;
  void set_checkpoint_policy(const CheckpointPolicy& policy) override;
  void set_attention(AttentionKind kind) override;  // every chunk's (stage 08)
  void init_weights(std::uint64_t seed) override;
  const float* master_params() const override { return params_.data(); }
  float* params() { return params_.data(); }
  void set_master_params(const float* values) override;
  // This stage's update, with the gradient norm of this stage alone (PipelineStrategy clips with
  // the norm over all stages; this is for a one-stage use).
  StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) override;
  float* fp32_grads() override { return grads_.data(); }
  std::size_t block_forward_count() const override;
  std::string precision_name() const override { return "fp32"; }

 private:
  GPTConfig config_;
  ParamLayout layout_;
  Buffer<float> params_, grads_;
  std::vector<std::unique_ptr<GPT>> chunks_;
};

}  // namespace scalelab
