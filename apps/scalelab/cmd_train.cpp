// `scalelab train`: one training run with live progress, a memory report and optional files;
// under mpirun, one rank of a parallel run laid out by --dp/--tp/--pp.
#include <memory>

#include "commands.hpp"
#include "train_options.hpp"
#include "train_run.hpp"

namespace scalelab::cli {

void add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  auto log_every = std::make_shared<int>(10);
  CLI::App* cmd = app.add_subcommand("train",
                                     "Train a GPT on the CPU or a GPU (any combination of the stage features)");
  add_train_flags(cmd, *flags, /*parallel=*/true);
  cmd->add_option("--log-every", *log_every, "Steps between progress lines")->capture_default_str();
  cmd->callback([=] {
    RunOutput out;
    out.log_every = *log_every;
    run_training_job(flags->finish(), out);
  });
}

}  // namespace scalelab::cli
