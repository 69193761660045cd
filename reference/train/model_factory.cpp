// Chooses the model implementation for a precision.
#include "core/error.hpp"
#include "train/fp32_model.hpp"
#include "train/trainer.hpp"

namespace scalelab {

std::unique_ptr<TrainModel> make_train_model(const GPTConfig& config, const std::string& precision,
                                             MemoryTracker* tracker) {
  if (precision == "fp32") return std::make_unique<Fp32TrainModel>(config, tracker);
  throw ConfigError("precision: '" + precision + "' is not available in this build; use fp32");
}

}  // namespace scalelab
