// Chooses the model implementation for a precision: the fp32 GPT (stages 00-02) or the
// mixed-precision GPT with bf16 or fp16 storage and fp32 master weights (stage 03).
#include "core/error.hpp"
#include "precision/mixed_model.hpp"
#include "train/fp32_model.hpp"
#include "train/trainer.hpp"

namespace scalelab {

std::unique_ptr<TrainModel> make_train_model(const GPTConfig& config, const std::string& precision,
                                             MemoryTracker* tracker) {
  if (precision == "fp32") return std::make_unique<Fp32TrainModel>(config, tracker);
  if (precision == "bf16" || precision == "fp16")
    return std::make_unique<MixedPrecisionModel>(config, parse_half_format(precision), tracker);
  throw ConfigError("precision: unknown precision '" + precision + "'; use fp32, bf16 or fp16");
}

}  // namespace scalelab
