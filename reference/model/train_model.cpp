// Defaults of TrainModel's optional abilities.
#include "model/train_model.hpp"

#include "core/error.hpp"

namespace scalelab {

float* TrainModel::fp32_grads() {
  throw ConfigError("ddp: data parallelism needs fp32 gradients, and --precision " + precision_name() +
                    " keeps them in half; use --precision fp32 with --ddp");
}

void TrainModel::set_attention(AttentionKind kind) {
  // Every CPU model overrides this (fp32, mixed precision, ZeRO, pipeline stages, tensor
  // parallelism); the models that keep the default are the GPU models (kernels/model).
  const bool gpu = grads_memory_space() == MemorySpace::kDevice;
  require(kind == AttentionKind::kNaive, "attention",
          std::string("--attention ") + attention_kind_name(kind) + " is not built for the " + precision_name() +
              (gpu ? " GPU model in this build (the CPU models run it in fp32, bf16 and fp16)"
                   : " model in this build"),
          gpu ? "use --attention naive, or --device cpu" : "use --attention naive");
}

void TrainModel::set_grad_ready_hook(std::function<void(std::size_t)> hook) {
  if (hook) fp32_grads();  // the same limitation, the same message
}

}  // namespace scalelab
