// The fp32 optimizer step: check, scale, clip, update in place.
#include "train/fp32_model.hpp"

#include <algorithm>
#include <cmath>

namespace scalelab {

void Fp32TrainModel::set_master_params(const float* values) {
  std::copy(values, values + gpt_.num_params(), gpt_.params());
}

TrainModel::StepOutcome Fp32TrainModel::optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) {
  StepOutcome out;
  float* g = gpt_.grads();
  const std::size_t n = gpt_.num_params();
  if (grad_scale != 1.0) {
    const float s = static_cast<float>(grad_scale);
    for (std::size_t i = 0; i < n; ++i) g[i] *= s;
  }
  out.grad_norm = grad_norm(g, n);
  if (!std::isfinite(out.grad_norm)) {
    out.skipped = true;
    return out;
  }
  if (clip > 0) clip_grad_norm(g, n, clip);
  optimizer.step(gpt_.params(), g, lr);
  return out;
}

}  // namespace scalelab
