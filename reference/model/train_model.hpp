// What the trainer needs from a model, whatever its precision: forward, backward, the flat
// fp32 "master" parameters the optimizer updates, and the gradients in fp32 for that update.
// Stage 00-02 use the fp32 GPT directly (Fp32TrainModel); stage 03 adds a half-precision model
// with fp32 master weights behind the same interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "comm/datatype.hpp"
#include "model/checkpoint_policy.hpp"
#include "model/config.hpp"
#include "model/layers/attention_kind.hpp"
#include "model/params.hpp"
#include "optim/adamw.hpp"

namespace scalelab {

class TrainModel {
 public:
  virtual ~TrainModel() = default;
  virtual const GPTConfig& config() const = 0;
  virtual const ParamLayout& layout() const = 0;
  virtual std::size_t num_params() const = 0;
  // Mean loss of tokens (B,T) against targets (B,T); saves what backward needs.
  virtual double forward(const int* tokens, const int* targets, int B, int T) = 0;
  // Accumulates (+=) d(loss_scale * loss)/d params for the last forward.
  virtual void backward(double loss_scale) = 0;
  virtual void zero_grad() = 0;
  virtual void set_checkpoint_policy(const CheckpointPolicy& policy) = 0;
  // Stage 08: which attention the blocks run (--attention). The default accepts naive and throws
  // a ConfigError for chunked and flash; the CPU models (Fp32TrainModel, ZeroModel,
  // PipelineStageModel, TensorParallelModel, and MixedPrecisionModel in bf16 and fp16) run all
  // three, the GPU models naive and flash. Call it after set_checkpoint_policy: selective with
  // chunked or flash is refused (model/attention_block.hpp).
  virtual void set_attention(AttentionKind kind);
  // GPT-2 initialisation (model/gpt.hpp), deterministic in the seed.
  virtual void init_weights(std::uint64_t seed) = 0;
  // The fp32 parameters the optimizer updates: the model's own (fp32) or the master copy (mixed).
  virtual const float* master_params() const = 0;
  // Replaces the parameters (num_params values, ParamLayout order), e.g. from a file.
  virtual void set_master_params(const float* values) = 0;
  // One optimizer step from the accumulated gradients, which are first multiplied by
  // grad_scale (1/loss_scale under mixed precision, else 1) and clipped to a global norm of
  // `clip` (0: no clipping). If any gradient is inf or NaN nothing changes and the step is
  // reported as skipped (the loss scaler then lowers its scale).
  struct StepOutcome {
    bool skipped = false;
    double grad_norm = 0;  // of the unscaled gradients, before clipping
  };
  virtual StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) = 0;
  // Stage 04: the gradient buffer as fp32 (data parallelism all-reduces it in place) and the
  // model's grad-ready notifications (GPTModel::set_grad_ready_hook). A model that cannot offer
  // them throws ConfigError naming the setting.
  virtual float* fp32_grads();
  virtual void set_grad_ready_hook(std::function<void(std::size_t)> hook);
  // Stage 04 with stage 03: the gradient buffer as the model keeps it, which is what data
  // parallelism reduces. By default fp32_grads() as kFloat32 (throwing as it does); the
  // mixed-precision models hand over their half gradients (kBFloat16 or kFloat16), which then
  // travel and are summed in half, as PyTorch's DDP does with a bf16 model. g + n is the place n
  // elements further on, whatever the element type.
  struct GradBuffer {
    void* data = nullptr;
    DataType type = DataType::kFloat32;
    GradBuffer operator+(std::size_t n) const { return {static_cast<char*>(data) + n * dtype_size(type), type}; }
  };
  virtual GradBuffer typed_grads() { return {fp32_grads(), DataType::kFloat32}; }
  // Where fp32_grads() points: host memory, or a GPU's (the GPU models). Data parallelism needs
  // a communicator working in the same memory space (Communicator::memory_space()).
  virtual MemorySpace grads_memory_space() const { return MemorySpace::kHost; }
  // Models that keep AdamW's m and v beside their parameters on a device (the GPU models in
  // kernels/model) return true. The trainer's AdamW then holds only the configuration, the step
  // count and a host mirror of m and v that is not counted as memory; these two copy between the
  // mirror and the device for checkpoints.
  virtual bool owns_optimizer_state() const { return false; }
  // The tracker that counts the trainer's AdamW m and v: the run's (`run_tracker`), none when
  // the model keeps its own copy (above), or another memory space's, for a model that offloads
  // its optimizer state to host memory (ZeRO-Offload, dist/zero_model.hpp).
  virtual MemoryTracker* optimizer_tracker(MemoryTracker* run_tracker) {
    return owns_optimizer_state() ? nullptr : run_tracker;
  }
  virtual void download_optimizer_state(AdamW& /*optimizer*/) const {}
  virtual void upload_optimizer_state(const AdamW& /*optimizer*/) {}
  // Number of block forwards since construction (stage 02 counts the recompute).
  virtual std::size_t block_forward_count() const = 0;
  virtual std::string precision_name() const = 0;
};

}  // namespace scalelab
