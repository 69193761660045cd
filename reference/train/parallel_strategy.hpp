// The seam every parallel stage plugs into. The trainer (train/trainer.cpp) knows one thing
// about parallelism: it holds a ParallelStrategy and calls it at fixed points of every step.
//
//   Trainer::step()                          the strategy decides
//     model.zero_grad(); next global batch
//     strategy.begin_step(batch)             what happens before any compute (DDP: arm the buckets)
//     strategy.run_micro_batches(...)        which rows this rank runs and in what order
//                                            (01: one after another; 05: a pipeline schedule)
//     strategy.sync_gradients()              the gradients become those of the whole batch
//                                            (04: all-reduce; 07 reduce-scatters during backward)
//     strategy.mean_loss(loss)               the loss of the whole batch, the same on every rank
//     strategy.optimizer_step(...)           the update (07: each rank updates its shard)
//     strategy.step_report()                 bytes moved and communication time of the step
//
// Before the first step the strategy builds this rank's model (make_model: the whole model, a
// pipeline stage's slice, a tensor-parallel shard) and attaches to it (attach: DDP's replicas
// agree and start from rank 0's weights).
//
// Single-device training (train/single_device.hpp) and data parallelism (dist/ddp_strategy.hpp)
// are its first two implementations; parallel/strategy_factory.cpp picks one from
// TrainOptions::parallel. A new stage implements this interface in its own files and adds one
// line to the factory: it does not touch the trainer or the models.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "model/train_model.hpp"
#include "optim/adamw.hpp"
#include "train/train_options.hpp"

namespace scalelab {

class Timeline;
struct TrainCheckpoint;

// Builds a model for a config and a precision. The library cannot see CUDA, so a program built
// with it hands the trainer a factory for the GPU models (apps/scalelab/device_models.hpp).
using TrainModelFactory =
    std::function<std::unique_ptr<TrainModel>(const GPTConfig&, const std::string& precision, MemoryTracker*)>;

// One optimizer step's global batch: rows x T tokens and targets, the same on every rank.
struct GlobalBatch {
  const int* inputs = nullptr;   // (rows, T)
  const int* targets = nullptr;  // (rows, T)
  int rows = 0;                  // B, the global batch
  int T = 0;
  int micro_batches = 1;  // per replica (TrainOptions::micro_batches())
};

// What a strategy is given when the trainer installs it: the model, the optimizer and the
// settings the run was started with. `run_description` names everything that must agree on
// every rank (config, seed, batch, data, ...) for replicas to be replicas.
struct StrategyContext {
  TrainModel& model;
  AdamW& optimizer;
  const TrainOptions& options;
  MemoryTracker* tracker = nullptr;
  int seq_len = 0;
  std::string run_description;
};

// Communication during one step, as this rank saw it.
struct StepCommReport {
  std::uint64_t bytes_sent = 0;  // by this rank, in the step's gradient collectives
  double comm_seconds = 0;       // time covered by at least one collective
  double hidden_fraction = 0;    // of that time, the part that overlapped compute
};

class ParallelStrategy {
 public:
  virtual ~ParallelStrategy() = default;

  // One line for the run's header: what this rank does ("single device", "DDP bucketed over 4
  // ranks, 3 buckets, ...").
  virtual std::string describe() const = 0;
  // How many data-parallel replicas split each batch's rows (1 without data parallelism). The
  // trainer sizes validation pieces by it.
  virtual int data_parallel_size() const { return 1; }

  // This rank's model, built once before anything else touches it: by default the whole model
  // from `whole` (the CPU's or the GPU's factory). A pipeline stage builds its slice of the
  // blocks, tensor parallelism its shard of every layer.
  virtual std::unique_ptr<TrainModel> make_model(const GPTConfig& config, const std::string& precision,
                                                 MemoryTracker* tracker, const TrainModelFactory& whole) {
    return whole(config, precision, tracker);
  }

  // Called once, after the model and optimizer exist and the weights are initialised or loaded,
  // before the first step (collective where the strategy communicates: replicas agree here).
  virtual void attach(const StrategyContext& context) = 0;

  // Before the step's compute.
  virtual void begin_step(const GlobalBatch& /*batch*/) {}
  // Forward and backward over this rank's part of the batch, accumulating (+=) into the
  // model's zeroed gradients, every backward multiplied by loss_scale (stage 03's loss scale).
  // Returns this rank's mean loss over the rows it ran.
  virtual double run_micro_batches(TrainModel& model, const GlobalBatch& batch, double loss_scale) = 0;
  // After the last backward of the step: afterwards the gradients the optimizer reads are the
  // gradients of the whole batch's mean loss.
  virtual void sync_gradients(TrainModel& /*model*/) {}
  // The whole batch's mean loss from this rank's (collective where the rows were split).
  virtual double mean_loss(double local_loss) { return local_loss; }
  // The update; ZeRO updates only this rank's shard and gathers the parameters.
  virtual TrainModel::StepOutcome optimizer_step(TrainModel& model, AdamW& optimizer, double lr, double grad_scale,
                                                 double clip) {
    return model.optimizer_step(optimizer, lr, grad_scale, clip);
  }
  // The mean loss of rows x T tokens, forward only (validation); every rank returns the same.
  // A pipeline runs its stages here; everyone else runs the whole model.
  virtual double evaluate(TrainModel& model, const int* inputs, const int* targets, int rows, int T) {
    return model.forward(inputs, targets, rows, T);
  }

  // What the step moved (zero for a strategy that does not communicate).
  virtual StepCommReport step_report() const { return {}; }
  // The timeline of the last step (compute and communication intervals), or null.
  virtual const Timeline* timeline() const { return nullptr; }
  // What the strategy measured in the last step, in a line for the end of a run (the pipeline's
  // bubble); empty by default.
  virtual std::string report() const { return {}; }

  // The part of whole-model values (ParamLayout(config) order: a checkpoint's parameters, m or
  // v, or a weights file's tensors) that this rank's model holds, in model.layout() order. By
  // default the tensors of model.layout() by name (the whole model, or a pipeline stage's);
  // tensor parallelism cuts every split tensor to its shard.
  virtual std::vector<float> held_values(const TrainModel& model, const std::vector<float>& whole) const;

  // The strategy's own part of a training checkpoint (shards, its counters), written after and
  // read after the trainer's part. Nothing by default.
  // The training checkpoint at `path` (--resume) as this rank holds it: params, m and v cut to
  // this rank's part. By default one whole-model file cut by held_checkpoint(); ZeRO reads its
  // own shard file (or every shard, to re-cut them for another number of ranks).
  virtual TrainCheckpoint load_checkpoint(const std::string& path, const TrainModel& model) const;
  // A whole-model checkpoint's params, m and v cut by held_values().
  TrainCheckpoint held_checkpoint(const TrainModel& model, const TrainCheckpoint& whole) const;

  virtual void save_state(TrainCheckpoint& /*checkpoint*/) const {}
  virtual void load_state(const TrainCheckpoint& /*checkpoint*/) {}

  // Files at the end of a run, called on every rank (collective where the strategy gathers):
  // the weights as one nanoGPT-named safetensors file, and the training state. By default
  // this rank writes both; replicas leave it to rank 0, sharded strategies gather or write
  // one file per rank.
  virtual void save_weights(const TrainModel& model, const std::string& path) const;
  virtual void save_checkpoint(const TrainCheckpoint& checkpoint, const std::string& path) const;
};

// Builds the strategy for a run's options (parallel/strategy_factory.hpp makes the library's; a
// test can hand the trainer its own).
using StrategyFactory = std::function<std::unique_ptr<ParallelStrategy>(const TrainOptions&)>;

}  // namespace scalelab
