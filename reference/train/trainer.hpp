// The training loop every stage shares: options, one optimizer step at a time, validation,
// checkpoints. The stage features are runtime options that compose: gradient accumulation
// (01), activation checkpointing (02), mixed precision (03).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "data/loader.hpp"
#include "dist/ddp.hpp"
#include "io/checkpoint.hpp"
#include "model/checkpoint_policy.hpp"
#include "optim/adamw.hpp"
#include "train/loss_scaler.hpp"
#include "model/train_model.hpp"

namespace scalelab {

struct TrainOptions {
  std::string config = "mini";  // tiny, mini, gpt2
  int steps = 100;
  int batch = 16;               // B: rows per optimizer step (the global batch)
  int seq_len = 0;              // T; 0 means the config's max_seq_len
  AdamWConfig adamw{.lr = 1e-3};
  std::uint64_t seed = 1337;    // weights and data order
  std::string data;             // text file or llm.c shard; empty: the default corpus
  double val_fraction = 0.1;
  int val_every = 0;            // steps between validation losses; 0: only at the end
  int val_batches = 4;
  int threads = 1;              // BLAS threads
  int grad_accum = 1;           // stage 01: micro-batches per step
  CheckpointPolicy checkpoint;  // stage 02
  std::string precision = "fp32";  // stage 03: fp32, bf16, fp16
  std::string device = "cpu";   // cpu or cuda; cuda needs a model factory (see Trainer)
  std::string init_weights;     // safetensors to start from (else GPT-2 init)
  std::string save_weights;     // safetensors to write at the end
  std::string save_checkpoint;  // training state to write at the end
  std::string resume;           // training state to continue from
  std::string metrics;          // JSON-lines file, one line per step
  // Throws ConfigError naming the first bad option and its fix.
  void validate() const;
};

struct StepStats {
  long step = 0;           // optimizer steps done, this one included
  double loss = 0;         // mean training loss of the batch
  double grad_norm = 0;
  bool skipped = false;    // mixed precision: inf/NaN gradients, no update
  double loss_scale = 1;
  double seconds = 0;
  double tokens_per_s = 0;
  // Stage 04, data parallelism (zero without it):
  double comm_hidden_fraction = 0;  // of the all-reduce time that overlapped backward
  double comm_seconds = 0;
  std::uint64_t comm_bytes_sent = 0;  // by this rank during the step
};

// Builds the model for a config and a precision. The library cannot see CUDA, so a program
// built with it hands the trainer a factory for the GPU models (apps/scalelab/device_models.hpp).
using TrainModelFactory =
    std::function<std::unique_ptr<TrainModel>(const GPTConfig&, const std::string& precision, MemoryTracker*)>;

class Trainer {
 public:
  // Builds the model and optimizer, loads data, weights or a checkpoint, as the options say.
  // Without a factory the model is the CPU's (make_train_model), and options.device must be "cpu".
  Trainer(const TrainOptions& options, MemoryTracker* tracker, const TrainModelFactory& factory = {});
  ~Trainer();

  // Stage 04: from now on train as one of comm.size() data-parallel replicas (collective:
  // every rank calls it). Checks that every rank was started alike, then copies rank 0's
  // parameters to all. Each rank then trains on its B/d rows of every batch.
  // comm carries the host-side traffic (the checks, the starting parameters, the loss). The
  // gradients go through grad_comm when given: a communicator over the same ranks in the
  // memory space of the model's gradients (a GPU model's: NCCL or a host-staging adapter);
  // without it, through comm.
  void enable_data_parallel(Communicator& comm, const DdpOptions& ddp, Communicator* grad_comm = nullptr);
  DataParallel* data_parallel() { return ddp_.get(); }

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
  long steps_done() const { return optimizer_->step_count(); }
  int seq_len() const { return T_; }
  std::size_t tokens_per_step() const { return static_cast<std::size_t>(options_.batch) * T_; }
  // Model flops per token for throughput: 6N + 12 L C T (DESIGN.md's convention).
  double flops_per_token() const;

 private:
  TrainOptions options_;
  MemoryTracker* tracker_;
  int T_ = 0;
  std::unique_ptr<TrainModel> model_;
  std::unique_ptr<AdamW> optimizer_;
  LossScaler scaler_;
  TokenSplit data_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::vector<int> inputs_, targets_;
  Communicator* dp_comm_ = nullptr;    // host memory: checks, parameters, the loss
  Communicator* grad_comm_ = nullptr;  // the gradients' all-reduces (dp_comm_ unless given)
  std::unique_ptr<DataParallel> ddp_;
};

// Builds the model for a precision ("fp32", "bf16", "fp16"); ConfigError for anything else.
std::unique_ptr<TrainModel> make_train_model(const GPTConfig& config, const std::string& precision,
                                             MemoryTracker* tracker);

}  // namespace scalelab
