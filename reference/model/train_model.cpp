// Defaults of TrainModel's optional abilities.
#include "model/train_model.hpp"

#include "core/error.hpp"

namespace scalelab {

float* TrainModel::fp32_grads() {
  throw ConfigError("ddp: data parallelism needs fp32 gradients, and --precision " + precision_name() +
                    " keeps them in half; use --precision fp32 with --ddp");
}

void TrainModel::set_attention(AttentionKind kind) {
  const bool gpu = grads_memory_space() == MemorySpace::kDevice;
  require(kind == AttentionKind::kNaive, "attention",
          std::string("--attention ") + attention_kind_name(kind) + " is not built for the " + precision_name() +
              (gpu ? " GPU" : "") + " model in this build (only the fp32 CPU model runs it)",
          gpu ? "use --attention naive, or --device cpu --precision fp32"
              : "use --attention naive, or --precision fp32");
}

void TrainModel::set_grad_ready_hook(std::function<void(std::size_t)> hook) {
  if (hook) fp32_grads();  // the same limitation, the same message
}

}  // namespace scalelab
