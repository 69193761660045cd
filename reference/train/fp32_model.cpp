// The fp32 optimizer step: check, scale, clip, update in place.
#include "train/fp32_model.hpp"

#include <algorithm>
#include <cmath>

namespace scalelab {

void Fp32TrainModel::set_master_params(const float* values) {
  std::copy(values, values + gpt_.num_params(), gpt_.params());
}

TrainModel::StepOutcome Fp32TrainModel::optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) {
  return fp32_optimizer_step(optimizer, gpt_.params(), gpt_.grads(), gpt_.num_params(), lr, grad_scale, clip);
}

TrainModel::StepOutcome fp32_optimizer_step(AdamW& optimizer, float* params, float* g, std::size_t n, double lr,
                                            double grad_scale, double clip, const GradNormFn& norm_of) {
  TrainModel::StepOutcome out;
  if (grad_scale != 1.0) {
    const float s = static_cast<float>(grad_scale);
    for (std::size_t i = 0; i < n; ++i) g[i] *= s;
  }
  out.grad_norm = norm_of ? norm_of(g, n) : grad_norm(g, n);
  if (!std::isfinite(out.grad_norm)) {
    out.skipped = true;
    return out;
  }
  if (clip > 0) clip_to_norm(g, n, out.grad_norm, clip);
  optimizer.step(params, g, lr);
  return out;
}

}  // namespace scalelab
