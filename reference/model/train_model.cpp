// Defaults of TrainModel's optional abilities.
#include "model/train_model.hpp"

#include "core/error.hpp"

namespace scalelab {

float* TrainModel::fp32_grads() {
  // Data parallelism reduces typed_grads() in any type; what still asks for fp32 gradients is
  // refused before it gets here (train/train_options.hpp: require_cpu_fp32).
  throw ConfigError("precision: --precision " + precision_name() +
                    " keeps the gradients in half, and this needs them in fp32; use --precision fp32");
}

void TrainModel::set_attention(AttentionKind kind) {
  // Every model of this kit overrides this (the CPU models run all three kinds; the GPU models
  // naive and flash, and they refuse chunked themselves). A model written elsewhere that keeps the
  // default runs naive attention only, and says so.
  require(kind == AttentionKind::kNaive, "attention",
          std::string("--attention ") + attention_kind_name(kind) + " is not built for the " + precision_name() +
              " model in this build",
          "use --attention naive");
}

void TrainModel::set_grad_ready_hook(std::function<void(std::size_t)> hook) {
  if (hook) fp32_grads();  // the same limitation, the same message
}

}  // namespace scalelab
