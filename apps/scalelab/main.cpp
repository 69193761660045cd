// scalelab: train a GPT stage by stage and measure what each technique costs.
//   scalelab train ...   one training run (any combination of the stage features)
//   scalelab ladder ...  every stage side by side on one config, with a comparison table
//   scalelab tokenize    a text file to an llm.c token shard
//   scalelab schedule    a pipeline schedule simulated: Gantt chart, warm-up, bubble
//   scalelab bench comm  collective bandwidth, our ring vs the built-in (under mpirun)
// main() is the only place that turns an error into an exit status: 2 for a bad setting
// (the message names it and the fix), 1 for anything else.
#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"scalelab: how neural networks are trained at scale, built stage by stage"};
  app.require_subcommand(1);
  scalelab::cli::add_train_command(app);
  scalelab::cli::add_ladder_command(app);
  scalelab::cli::add_tokenize_command(app);
  scalelab::cli::add_schedule_command(app);
  scalelab::cli::add_plan_command(app);
  scalelab::cli::add_bench_comm_command(
      *app.add_subcommand("bench", "Measure one part on its own")->require_subcommand(1));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const scalelab::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
