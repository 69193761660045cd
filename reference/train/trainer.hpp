// The training loop every stage shares: options, one optimizer step at a time, validation,
// checkpoints. The stage features are runtime options that compose: gradient accumulation
// (01), activation checkpointing (02) and mixed precision (03) are the model's and the loop's;
// everything that spans ranks (04-07) is the ParallelStrategy's (train/parallel_strategy.hpp),
// which the trainer calls at fixed points of every step without knowing which one it is.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "data/loader.hpp"
#include "io/checkpoint.hpp"
#include "model/checkpoint_policy.hpp"
#include "model/train_model.hpp"
#include "optim/adamw.hpp"
#include "train/loss_scaler.hpp"
#include "train/parallel_strategy.hpp"
#include "train/train_options.hpp"

namespace scalelab {

struct StepStats {
  long step = 0;    // optimizer steps done, this one included
  double loss = 0;  // mean training loss of the batch
  double grad_norm = 0;
  bool skipped = false;  // mixed precision: inf/NaN gradients, no update
  double loss_scale = 1;
  double lr = 0;  // the learning rate of this step (the schedule's)
  double seconds = 0;
  double tokens_per_s = 0;
  // What the parallel strategy moved (zero on one device):
  double comm_hidden_fraction = 0;  // of the collective time that overlapped compute
  double comm_seconds = 0;
  std::uint64_t comm_bytes_sent = 0;  // by this rank during the step
};

class Trainer {
 public:
  // Builds the parallel strategy, loads the data, builds this rank's model (the strategy
  // decides which: the whole model, or a pipeline stage's slice, ...) and the optimizer, loads
  // weights or a checkpoint, as the options say. Without a model factory the model is the CPU's
  // (make_train_model), and options.device must be "cpu". Without a strategy factory the run is
  // on one device (SingleDevice), and options asking for more are refused; with one
  // (parallel/strategy_factory.hpp, or a test's own) the strategy is what it builds, attached
  // after the weights are in place (collective for a strategy that communicates).
  Trainer(const TrainOptions& options, MemoryTracker* tracker, const TrainModelFactory& factory = {},
          const StrategyFactory& strategies = {});
  ~Trainer();

  StepStats step();
  // Mean loss over the first val_batches fixed validation batches of `batch` rows (forward only).
  double validation_loss();

  TrainCheckpoint checkpoint() const;
  void restore(const TrainCheckpoint& ckpt);
  void save_checkpoint(const std::string& path) const;
  void save_weights(const std::string& path) const;

  TrainModel& model() { return *model_; }
  const TrainModel& model() const { return *model_; }
  AdamW& optimizer() { return *optimizer_; }
  const TrainOptions& options() const { return options_; }
  ParallelStrategy& strategy() { return *strategy_; }
  const ParallelStrategy& strategy() const { return *strategy_; }
  long steps_done() const { return optimizer_->step_count(); }
  // The learning-rate schedule and the step count it spans: the options' for a new run, the
  // checkpoint's for a resumed one (so the curve continues bit for bit).
  const LrSchedule& lr_schedule() const { return schedule_; }
  long schedule_steps() const { return schedule_steps_; }
  int seq_len() const { return T_; }
  std::size_t tokens_per_step() const { return static_cast<std::size_t>(options_.batch) * T_; }
  // Model flops per token for throughput: 6N + 12 L C T (docs/design.md's convention).
  double flops_per_token() const;

 private:
  TrainOptions options_;
  MemoryTracker* tracker_;
  int T_ = 0;
  std::unique_ptr<TrainModel> model_;
  // Declared after model_, so destroyed before it: under offload the model's host tracker counts m and v.
  std::unique_ptr<AdamW> optimizer_;
  LossScaler scaler_;
  LrSchedule schedule_;
  long schedule_steps_ = 0;
  TokenSplit data_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::vector<int> inputs_, targets_;
  std::unique_ptr<ParallelStrategy> strategy_;
  void restore_held(const TrainCheckpoint& held);  // restore() after the cut
  // What every rank must agree on to be a replica of the others (the strategy checks it).
  std::string run_description() const;
};

// Builds the model for a precision ("fp32", "bf16", "fp16"); ConfigError for anything else.
std::unique_ptr<TrainModel> make_train_model(const GPTConfig& config, const std::string& precision,
                                             MemoryTracker* tracker);

}  // namespace scalelab
