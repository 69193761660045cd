// The per-step scalars of the GPU's AdamW (adamw.hpp), computed on the host as the CPU computes
// them. Host code, apart from the kernels in adamw.cu, so that the GPU model's host side also
// builds without nvcc (tests/simt/ runs it on the CPU).
#include <cmath>

#include "core/error.hpp"
#include "kernels/optim/adamw.hpp"

namespace scalelab::cuda {

AdamWScalars adamw_scalars(const AdamWConfig& config, long t, double lr) {
  SCALELAB_CHECK(t > 0, "AdamW step count must be positive (call begin_step first), got ", t);
  // Line for line the CPU's update_range (optim/adamw.cpp).
  const double b1 = config.beta1, b2 = config.beta2;
  const double bias_correction1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double bias_correction2 = 1.0 - std::pow(b2, static_cast<double>(t));
  AdamWScalars k{};
  k.step_size = static_cast<float>(lr / bias_correction1);
  k.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  k.decay = static_cast<float>(1.0 - lr * config.weight_decay);
  k.beta1 = static_cast<float>(b1);
  k.beta2 = static_cast<float>(b2);
  k.one_minus_beta1 = static_cast<float>(1.0 - b1);
  k.one_minus_beta2 = static_cast<float>(1.0 - b2);
  k.eps = static_cast<float>(config.eps);
  return k;
}

}  // namespace scalelab::cuda
