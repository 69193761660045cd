// The micro-batch loop of gradient accumulation.
#include "train/accumulate.hpp"

#include <cstddef>
#include <string>

#include "core/error.hpp"

namespace scalelab {

double accumulate_gradients(TrainModel& model, const int* inputs, const int* targets, int B, int T, int k,
                            double loss_scale) {
  require(k >= 1, "grad_accum", "must be at least 1, got " + std::to_string(k), "use --grad-accum 1 for none");
  require(B % k == 0, "grad_accum",
          "batch " + std::to_string(B) + " is not divisible into " + std::to_string(k) + " micro-batches",
          "choose a --grad-accum that divides --batch " + std::to_string(B));
  // LAB 01 BEGIN accumulate_gradients: section 2
  const int micro = B / k;
  const std::size_t stride = static_cast<std::size_t>(micro) * T;
  double loss_sum = 0;
  for (int i = 0; i < k; ++i) {
    // Each micro-batch's loss is a mean over micro*T positions; scaling it by 1/k makes the
    // sum of the k backward passes the gradient of the mean over all B*T positions.
    loss_sum += model.forward(inputs + i * stride, targets + i * stride, micro, T);
    model.backward(loss_scale / k);
  }
  return loss_sum / k;
  // LAB 01 END
}

}  // namespace scalelab
