// The GPU GPT behind the trainer's TrainModel interface.
//
//   precision  what                        stored as (device)   memory category   bytes/param
//   fp32       parameters, gradients       fp32                 params, grads     4 + 4
//              AdamW m and v               fp32                 optimizer         8
//   bf16/fp16  parameters, gradients       half                 params, grads     2 + 2
//              master weights, m and v     fp32                 optimizer         4 + 8
//
// The same categories and byte counts as the CPU's Fp32TrainModel and MixedPrecisionModel, so
// a GPU run prints the same memory table (the trainer's AdamW becomes an uncounted host mirror
// of m and v for checkpoints: owns_optimizer_state()). The optimizer step never copies the
// gradients to the host: scale, norm and AdamW run on the device, and the host reads back one
// number, the sum of squares, which is also the inf/NaN check (non-finite on any inf or NaN).
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/core/dtype.hpp"
#include "kernels/model/gpu_gpt.hpp"
#include "model/train_model.hpp"

namespace scalelab::cuda {

template <typename F>
class GpuTrainModel final : public TrainModel {
 public:
  static constexpr bool kMixed = !std::is_same_v<F, float>;

  GpuTrainModel(const GPTConfig& config, MemoryTracker* tracker, const GpuOptions& options = {});
  GpuGPT<F>& gpt() { return gpt_; }
  const GpuGPT<F>& gpt() const { return gpt_; }
  cudaStream_t stream() const { return gpt_.stream(); }

  const GPTConfig& config() const override { return gpt_.config(); }
  const ParamLayout& layout() const override { return gpt_.layout(); }
  std::size_t num_params() const override { return gpt_.num_params(); }
  double forward(const int* tokens, const int* targets, int B, int T) override {
    return gpt_.forward(tokens, targets, B, T);
  }
  void backward(double loss_scale) override { gpt_.backward(static_cast<float>(loss_scale)); }
  void zero_grad() override { gpt_.zero_grad(); }
  void set_checkpoint_policy(const CheckpointPolicy& policy) override { gpt_.set_checkpoint_policy(policy); }
  // Stage 08: naive or flash (GpuGPT::set_attention), in every precision.
  void set_attention(AttentionKind kind) override { gpt_.set_attention(kind); }
  void init_weights(std::uint64_t seed) override;
  // A host copy of the fp32 parameters (fp32: the model's own; mixed: the master weights), made
  // on each call: valid until the next call.
  const float* master_params() const override;
  void set_master_params(const float* values) override;
  StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) override;
  // Stage 04: the device gradient buffer in the model's type (bf16/fp16 gradients are reduced in
  // half over NCCL, as the CPU's MixedPrecisionModel's are over MPI), and GpuGPT's grad-ready
  // notifications (final in stream order on stream(): see GpuGPT::set_grad_ready_hook).
  // fp32_grads() is the fp32 model's only: mixed precision throws TrainModel's ConfigError.
  float* fp32_grads() override;
  GradBuffer typed_grads() override { return {gpt_.grads().data(), DType<F>::comm_type}; }
  void set_grad_ready_hook(std::function<void(std::size_t)> hook) override {
    gpt_.set_grad_ready_hook(std::move(hook));
  }
  MemorySpace grads_memory_space() const override { return MemorySpace::kDevice; }
  bool owns_optimizer_state() const override { return true; }
  void download_optimizer_state(AdamW& optimizer) const override;
  void upload_optimizer_state(const AdamW& optimizer) override;
  std::size_t block_forward_count() const override { return gpt_.block_forward_count(); }
  std::string precision_name() const override { return DType<F>::name; }

  // The accumulated gradients widened to fp32 on the host (num_params), for tests.
  std::vector<float> grads_to_host() const;

 private:
  GpuGPT<F> gpt_;
  DeviceBuffer<float> master_;                   // (num_params) fp32 master weights; mixed precision only
  DeviceBuffer<float> m_, v_;                    // (num_params) AdamW moments
  DeviceBuffer<double> sum_squares_, partials_;  // (1), (kSumSquaresBlocks): the norm's reduction
  mutable std::vector<float> host_params_;       // master_params()'s copy
};

// The model for a precision ("fp32", "bf16", "fp16") on the current device; ConfigError for
// anything else. The caller checks that a device exists (device_count()).
std::unique_ptr<TrainModel> make_gpu_train_model(const GPTConfig& config, const std::string& precision,
                                                 MemoryTracker* tracker, const GpuOptions& options = {});

}  // namespace scalelab::cuda
