// One complete training run as the CLI performs it: the loop, the progress lines, validation,
// the metrics file, the memory report, weights and checkpoint at the end. `train` runs one;
// `ladder` runs one per stage and compares them.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "train/trainer.hpp"

namespace scalelab::cli {

struct RunSummary {
  std::vector<double> losses;  // training loss per step
  double final_val_loss = 0;
  double tokens_per_s = 0;     // median over the steps
  double gflops = 0;           // model flops per second at that median
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
  std::string label;     // prefixed to progress lines (the ladder's stage name)
};

// Stage 04: train as one data-parallel replica of `comm` (every rank calls run_training).
struct DataParallelRun {
  Communicator* comm = nullptr;
  DdpOptions ddp;
  std::string trace;  // Chrome trace of the last step, one file per rank (".rankN.json")
  // --device cuda: the gradients go over NCCL (--backend nccl), else through host staging over
  // comm (device_models.hpp: gradient_communicator_for).
  bool nccl = false;
};

RunSummary run_training(const TrainOptions& options, const RunOutput& out, const DataParallelRun* dp = nullptr);

}  // namespace scalelab::cli
