// Defaults of TrainModel's optional abilities.
#include "model/train_model.hpp"

#include "core/error.hpp"

namespace scalelab {

float* TrainModel::fp32_grads() {
  throw ConfigError("ddp: data parallelism needs fp32 gradients, and --precision " + precision_name() +
                    " keeps them in half; use --precision fp32 with --ddp");
}

void TrainModel::set_grad_ready_hook(std::function<void(std::size_t)> hook) {
  if (hook) fp32_grads();  // the same limitation, the same message
}

}  // namespace scalelab
