// `scalelab train`: one training run with live progress, a memory report and optional files.
#include <memory>

#include "commands.hpp"
#include "train_options.hpp"
#include "train_run.hpp"

namespace scalelab::cli {

void add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  auto log_every = std::make_shared<int>(10);
  CLI::App* cmd = app.add_subcommand("train", "Train a GPT on the CPU (any combination of the stage features)");
  add_train_flags(cmd, *flags);
  cmd->add_option("--log-every", *log_every, "Steps between progress lines")->capture_default_str();
  cmd->callback([flags, log_every] {
    RunOutput out;
    out.log_every = *log_every;
    run_training(flags->finish(), out);
  });
}

}  // namespace scalelab::cli
