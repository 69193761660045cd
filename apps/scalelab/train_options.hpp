// Command-line flags for TrainOptions, shared by `train` and `ladder`: one flag per field.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "train/train_options.hpp"

namespace scalelab::cli {

struct TrainFlags {
  TrainOptions options;
  std::string checkpoint = "none";         // parsed into options.checkpoint by finish()
  std::string lr_schedule = "constant";    // parsed into options.lr_schedule.kind by finish()
  std::string options_file;                // --options-file: every option from a JSON file instead
  std::vector<CLI::Option*> option_flags;  // the flags that set a field of options
  // Turns the text flags into options (or reads the options file); throws ConfigError for bad
  // values, and for an options file given together with any other training flag.
  TrainOptions finish() const;
};

// Adds the model, data, optimizer and run flags to `cmd`; with `parallel` also the flags of the
// parallel layout (stages 04-07: --dp, --tp, --pp, --micro-batches, --schedule, --zero, ...).
void add_train_flags(CLI::App* cmd, TrainFlags& flags, bool parallel);

// Writes options as JSON (options_to_json) to path, creating its directory; the file that
// `--options-file` reads.
void write_options_file(const std::string& path, const TrainOptions& options);

}  // namespace scalelab::cli
