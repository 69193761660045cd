// Command-line flags for TrainOptions, shared by `train` and `ladder`.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "train/trainer.hpp"

namespace scalelab::cli {

struct TrainFlags {
  TrainOptions options;
  std::string checkpoint = "none";  // parsed into options.checkpoint by finish()
  // Turns the text flags into options; throws ConfigError for bad values.
  TrainOptions finish() const;
};

// Adds the model, data, optimizer and run flags to `cmd`.
void add_train_flags(CLI::App* cmd, TrainFlags& flags);

}  // namespace scalelab::cli
