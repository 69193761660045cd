// The fp32 GPT behind the trainer's interface (stages 00-02): the optimizer updates the
// model's own parameters from its own gradients, in place.
#pragma once

#include <functional>

#include "model/gpt.hpp"
#include "model/train_model.hpp"

namespace scalelab {

class Fp32TrainModel final : public TrainModel {
 public:
  Fp32TrainModel(const GPTConfig& config, MemoryTracker* tracker) : gpt_(config, tracker) {}
  GPT& gpt() { return gpt_; }

  const GPTConfig& config() const override { return gpt_.config(); }
  const ParamLayout& layout() const override { return gpt_.layout(); }
  std::size_t num_params() const override { return gpt_.num_params(); }
  double forward(const int* tokens, const int* targets, int B, int T) override {
    return gpt_.forward(tokens, targets, B, T);
  }
  void backward(double loss_scale) override { gpt_.backward(static_cast<float>(loss_scale)); }
  void zero_grad() override { gpt_.zero_grad(); }
  void set_checkpoint_policy(const CheckpointPolicy& policy) override { gpt_.set_checkpoint_policy(policy); }
  void set_attention(AttentionKind kind) override { gpt_.set_attention(kind); }
  void init_weights(std::uint64_t seed) override { gpt_.init_weights(seed); }
  const float* master_params() const override { return gpt_.params(); }
  void set_master_params(const float* values) override;
  StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) override;
  float* fp32_grads() override { return gpt_.grads(); }
  void set_grad_ready_hook(std::function<void(std::size_t)> hook) override {
    gpt_.set_grad_ready_hook(std::move(hook));
  }
  std::size_t block_forward_count() const override { return gpt_.block_forward_count(); }
  std::string precision_name() const override { return "fp32"; }

 private:
  GPT gpt_;
};

// The fp32 update of n parameters in place from their gradients: multiply by grad_scale, take
// the norm (norm_of; default: of these n values), skip the step if it is not finite, clip to
// `clip` (0: off), AdamW. A pipeline stage passes a norm over all stages (dist/pipeline_strategy).
using GradNormFn = std::function<double(const float* grads, std::size_t n)>;
TrainModel::StepOutcome fp32_optimizer_step(AdamW& optimizer, float* params, float* grads, std::size_t n, double lr,
                                            double grad_scale, double clip, const GradNormFn& norm_of = {});

}  // namespace scalelab
