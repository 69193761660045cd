// Stage 07 at the trainer's seam: ZeRO over the data-parallel group. Rows are split as in DDP
// (stage 04); the model keeps and moves the sharded state (dist/zero_model.hpp in fp32,
// dist/zero_mixed_model.hpp in bf16 or fp16); this class builds it, reports what a step moved,
// and saves and resumes the shards.
//
// Checkpoints: every rank writes its own shard (params, m, v of [begin, end) of the flat
// buffer) into its own file: rank 0 into the path given, rank r into "<path>.zero-rank<r>".
// Resuming with the same number of ranks reads one's own file; with another number, --reshard
// reads every shard, assembles the whole state and cuts this run's shard from it.
// Saving weights gathers one nanoGPT-named safetensors file, which rank 0 writes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "dist/ddp.hpp"
#include "dist/zero_train_model.hpp"
#include "train/parallel_strategy.hpp"

namespace scalelab {

// The file rank r of a ZeRO checkpoint at `path` writes.
std::string zero_shard_path(const std::string& path, int rank);

class ZeroStrategy final : public ParallelStrategy {
 public:
  // comm: the data-parallel group (the world: ZeRO does not compose with tp or pp yet).
  // device_model: how this program builds ZeRO's model for --device cuda (empty: the CPU only).
  ZeroStrategy(Communicator& comm, const TrainOptions& options, ZeroModelFactory device_model = {});

  std::string describe() const override;
  int data_parallel_size() const override { return comm_.size(); }
  std::unique_ptr<TrainModel> make_model(const GPTConfig& config, const std::string& precision, MemoryTracker* tracker,
                                         const TrainModelFactory& whole) override;
  // Collective: every rank was started alike.
  void attach(const StrategyContext& context) override;
  void begin_step(const GlobalBatch& batch) override;
  double run_micro_batches(TrainModel& model, const GlobalBatch& batch, double loss_scale) override;
  double mean_loss(double local_loss) override;
  TrainModel::StepOutcome optimizer_step(TrainModel& model, AdamW& optimizer, double lr, double grad_scale,
                                         double clip) override;
  StepCommReport step_report() const override { return report_; }
  const Timeline* timeline() const override;
  // Per-rank model state (measured vs formula) and traffic of the last step.
  std::string report() const override;
  // This rank's shard [begin, end) of whole-model values.
  std::vector<float> held_values(const TrainModel& model, const std::vector<float>& whole) const override;
  TrainCheckpoint load_checkpoint(const std::string& path, const TrainModel& model) const override;
  void save_weights(const TrainModel& model, const std::string& path) const override;
  void save_checkpoint(const TrainCheckpoint& checkpoint, const std::string& path) const override;

 private:
  Communicator& comm_;
  int stage_;
  bool reshard_;
  bool offload_;
  DdpOptions::Algorithm algorithm_;
  std::string precision_;
  ZeroModelFactory device_model_;    // set for a run on a GPU
  ZeroTrainModel* model_ = nullptr;  // the model make_model built (owned by the trainer)
  MemoryTracker* tracker_ = nullptr;
  int batch_rows_ = 0;
  CommStats before_;
  StepCommReport report_;
};

}  // namespace scalelab
