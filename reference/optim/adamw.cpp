// AdamW update, loop for loop the arithmetic of torch.optim.AdamW (single-tensor path).
#include "optim/adamw.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"

namespace scalelab {

void AdamWConfig::validate() const {
  require(lr > 0 && std::isfinite(lr), "lr", "must be a positive number, got " + std::to_string(lr),
          "pass e.g. --lr 1e-3");
  require(beta1 >= 0 && beta1 < 1, "beta1", "must be in [0, 1), got " + std::to_string(beta1), "e.g. 0.9");
  require(beta2 >= 0 && beta2 < 1, "beta2", "must be in [0, 1), got " + std::to_string(beta2), "e.g. 0.999");
  require(eps > 0, "eps", "must be positive, got " + std::to_string(eps), "e.g. 1e-8");
  require(weight_decay >= 0, "weight_decay", "must be non-negative, got " + std::to_string(weight_decay),
          "e.g. 0.01, or 0 to turn it off");
  require(grad_clip >= 0, "grad_clip", "must be non-negative, got " + std::to_string(grad_clip),
          "e.g. 1.0, or 0 to turn clipping off");
}

AdamW::AdamW(std::size_t n, const AdamWConfig& config, MemoryTracker* tracker)
    : config_(config), m_(n, MemCategory::kOptimizer, tracker), v_(n, MemCategory::kOptimizer, tracker) {
  config_.validate();
}

void AdamW::step(float* params, const float* grads) { step(params, grads, config_.lr); }

void AdamW::step(float* params, const float* grads, double lr) {
  begin_step();
  update_range(params, grads, 0, m_.size(), lr);
}

void AdamW::update_range(float* params, const float* grads, std::size_t offset, std::size_t count, double lr) {
  SCALELAB_CHECK(t_ > 0, "update_range() before begin_step()");
  SCALELAB_CHECK(offset + count <= m_.size(), "range [", offset, ", ", offset + count, ") outside ", m_.size());
  // LAB 00 BEGIN adamw_step: section 5
  const double b1 = config_.beta1, b2 = config_.beta2;
  // Like PyTorch, the scalar factors are computed in double and rounded once.
  const double bias_correction1 = 1.0 - std::pow(b1, static_cast<double>(t_));
  const double bias_correction2 = 1.0 - std::pow(b2, static_cast<double>(t_));
  const float step_size = static_cast<float>(lr / bias_correction1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float decay = static_cast<float>(1.0 - lr * config_.weight_decay);
  const float beta1 = static_cast<float>(b1), beta2 = static_cast<float>(b2);
  const float one_minus_b1 = static_cast<float>(1.0 - b1), one_minus_b2 = static_cast<float>(1.0 - b2);
  const float eps = static_cast<float>(config_.eps);
  float* m = m_.data() + offset;
  float* v = v_.data() + offset;
  for (std::size_t i = 0; i < count; ++i) {
    const float g = grads[i];
    params[i] *= decay;  // decoupled weight decay
    m[i] = m[i] * beta1 + g * one_minus_b1;
    v[i] = v[i] * beta2 + g * g * one_minus_b2;
    const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    params[i] -= step_size * (m[i] / denom);
  }
  // LAB 00 END
}

double grad_norm(const float* grads, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(grads[i]) * grads[i];
  return std::sqrt(s);
}

double clip_grad_norm(float* grads, std::size_t n, double max_norm) {
  const double norm = grad_norm(grads, n);
  clip_to_norm(grads, n, norm, max_norm);
  return norm;
}

void clip_to_norm(float* grads, std::size_t n, double norm, double max_norm) {
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    const float c = static_cast<float>(coef);
    for (std::size_t i = 0; i < n; ++i) grads[i] *= c;
  }
}

}  // namespace scalelab
