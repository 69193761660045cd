// Stage 03: the optimizer step of mixed precision. The gradients are half and carry the loss
// scale; the optimizer updates the fp32 master weights. One step:
//   1. widen the half gradients chunk by chunk, multiply by grad_scale (1/loss_scale), and sum
//      their squares: the norm of the unscaled gradients; inf or NaN anywhere makes it non-finite
//      and the step is skipped before anything has changed (the loss scaler then halves the scale);
//   2. clip (optional) with PyTorch's coefficient max_norm / (norm + 1e-6);
//   3. AdamW on the master weights, chunk by chunk (AdamW::begin_step once, then update_range);
//   4. round each updated master chunk to half: the parameters the next forward uses.
// Only one chunk of fp32 gradients exists at a time, never a full fp32 copy. The arithmetic on
// each gradient (g * s, then * coef) is the fp32 model's (train/fp32_model.cpp). A pipeline stage
// (stage 05, dist/pipeline_stage_model.hpp) runs the same step over its chunks' flat buffers, with
// the norm of the whole model (MixedNorm).
#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "precision/mixed_model.hpp"

namespace scalelab {

TrainModel::StepOutcome MixedPrecisionModel::optimizer_step(AdamW& optimizer, double lr, double grad_scale,
                                                            double clip) {
  SCALELAB_CHECK(master_count_ == num_params() && grad_count_ == num_params(),
                 "this mixed-precision model holds a shard of the master weights or no gradient buffer; its owner "
                 "(ZeRO, dist/zero_mixed_model.cpp) runs the optimizer step");
  const MixedStepBuffers buffers{master_data_, param_data_,   grad_data_,   num_params(),
                                 format_,      chunk_.data(), chunk_.size()};
  return mixed_optimizer_step(optimizer, buffers, lr, grad_scale, clip);
}

TrainModel::StepOutcome mixed_optimizer_step(AdamW& optimizer, const MixedStepBuffers& b, double lr, double grad_scale,
                                             double clip, const MixedNorm& norm) {
  TrainModel::StepOutcome out;
  const std::size_t n = b.count, chunk = b.chunk_size;
  const HalfFormat format = b.format;
  float* g = b.chunk;  // (chunk) fp32 gradients of the current range
  float* master = b.master;
  const std::uint16_t* half_grads = b.half_grads;
  std::uint16_t* half_params = b.half_params;
  // LAB 03 BEGIN mixed_optimizer_step: section 5
  const float scale = static_cast<float>(grad_scale);
  auto unscale = [&](std::size_t offset, std::size_t count) {
    half_to_float(g, half_grads + offset, count, format);
    if (scale != 1.0f)
      for (std::size_t i = 0; i < count; ++i) g[i] *= scale;
  };
  double sum_squares = 0;
  for (std::size_t offset = 0; offset < n; offset += chunk) {
    const std::size_t count = std::min(chunk, n - offset);
    unscale(offset, count);
    if (norm.share) {
      sum_squares += norm.share(g, offset, count);  // a pipeline stage: the elements it counts
    } else {
      for (std::size_t i = 0; i < count; ++i) sum_squares += static_cast<double>(g[i]) * g[i];
    }
  }
  // A pipeline stage: the whole model's sum, every stage's share added.
  out.grad_norm = std::sqrt(norm.total ? norm.total(sum_squares) : sum_squares);
  if (!std::isfinite(out.grad_norm)) {  // inf/NaN: skip, with parameters and Adam state untouched
    out.skipped = true;
    return out;
  }
  const double coef = clip > 0 ? clip / (out.grad_norm + 1e-6) : 1.0;
  optimizer.begin_step();
  for (std::size_t offset = 0; offset < n; offset += chunk) {
    const std::size_t count = std::min(chunk, n - offset);
    unscale(offset, count);
    if (coef < 1.0) {
      const float c = static_cast<float>(coef);
      for (std::size_t i = 0; i < count; ++i) g[i] *= c;
    }
    optimizer.update_range(master + offset, g, offset, count, lr);
    float_to_half(half_params + offset, master + offset, count, format);
  }
  // LAB 03 END
  return out;
}

}  // namespace scalelab
