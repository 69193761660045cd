// One complete training run as the CLI performs it: the loop, the progress lines, validation,
// the metrics file, the memory report, weights and checkpoint at the end. `train` runs one;
// `ladder` runs one per stage and compares them.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/memory.hpp"
#include "train/trainer.hpp"

namespace scalelab::cli {

struct RunSummary {
  std::vector<double> losses;  // training loss per step
  double final_val_loss = 0;
  double tokens_per_s = 0;  // median over the steps
  double gflops = 0;        // model flops per second at that median
  std::array<std::size_t, kMemCategoryCount> peak_bytes{};
  std::size_t num_params = 0;
  std::size_t block_forwards = 0;
  std::vector<float> final_params;  // for comparisons between stages
  double comm_hidden_fraction = 0;  // stage 04: mean over the steps after the first
  double comm_bytes_per_step = 0;   // sent by this rank
};

struct RunOutput {
  bool progress = true;  // print progress lines and the memory report
  int log_every = 10;
  std::string label;  // prefixed to progress lines (the ladder's stage name)
};

// One rank's run. world: the job's communicator (null: one process, no parallel strategies);
// the trainer's strategy comes from options.parallel (parallel/strategy_factory.hpp).
RunSummary run_training(const TrainOptions& options, const RunOutput& out, Communicator* world = nullptr);

// `scalelab train`: starts the communication runtime the options ask for (mpi under mpirun,
// else one local rank), validates the layout against the job on every rank, and runs
// run_training on each; rank 0 prints and writes the files. A failure on any rank ends the job.
void run_training_job(const TrainOptions& options, RunOutput out);

}  // namespace scalelab::cli
