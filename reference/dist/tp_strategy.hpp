// Stage 06 at the trainer's seam: tensor parallelism (and sequence parallelism), alone or with
// data parallelism on one grid [dp][tp] (comm/grid.hpp: the tp ranks are neighbours). Each rank
// builds its shard of the model (dist/tp_model.hpp); the ranks of a tensor-parallel group run
// the same rows, those of different replicas different rows. After the step's last backward:
//   1. under sequence parallelism, the replicated tensors' gradients summed over the tp group;
//   2. with dp > 1, one all-reduce of the rank's flat gradients over its data-parallel group
//      (replica i's tp rank r holds the same shard as replica j's tp rank r); with --zero 1, a
//      reduce-scatter instead, each replica updating its part of the shard and all-gathering the
//      parameters after the step (dist/distributed_optimizer.hpp).
// The optimizer clips with the whole model's gradient norm (dist/tp_model.cpp).
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "comm/grid.hpp"
#include "dist/device_tp_shard.hpp"
#include "dist/distributed_optimizer.hpp"
#include "dist/tp_model.hpp"
#include "train/parallel_strategy.hpp"

namespace scalelab {

class TensorParallelStrategy final : public ParallelStrategy {
 public:
  // Collective over world: makes the [dp][tp] grid. Throws ConfigError (the same on every rank)
  // for what this build's tensor parallelism does not do: a pipeline (PipelineStrategy runs
  // tp x pp), and on a GPU sequence parallelism. In mixed precision each rank's shard is a
  // MixedTensorParallelModel (dist/tp_mixed_model.hpp). With --device cuda, device_chunks makes
  // the shard's GPU half (dist/device_tp_shard.hpp): the shard computes there and keeps its
  // buffers and optimizer on the host, loaded before each step and evaluation, stored after the
  // step's last backward.
  TensorParallelStrategy(Communicator& world, const TrainOptions& options, DeviceTpChunkFactory device_chunks = {});
  ~TensorParallelStrategy() override;

  std::string describe() const override;
  int data_parallel_size() const override { return grid_->shape().dp; }
  std::unique_ptr<TrainModel> make_model(const GPTConfig& config, const std::string& precision, MemoryTracker* tracker,
                                         const TrainModelFactory& whole) override;
  void attach(const StrategyContext& context) override;
  void begin_step(const GlobalBatch& batch) override;
  double run_micro_batches(TrainModel& model, const GlobalBatch& batch, double loss_scale) override;
  void sync_gradients(TrainModel& model) override;
  double evaluate(TrainModel& model, const int* inputs, const int* targets, int rows, int T) override;
  double mean_loss(double local_loss) override;
  TrainModel::StepOutcome optimizer_step(TrainModel& model, AdamW& optimizer, double lr, double grad_scale,
                                         double clip) override;
  StepCommReport step_report() const override { return report_; }
  std::string report() const override;
  std::vector<float> held_values(const TrainModel& model, const std::vector<float>& whole) const override;
  // Replica 0's tp group gathers the whole model; its rank 0 writes one file (any layout can
  // load it).
  void save_weights(const TrainModel& model, const std::string& path) const override;
  void save_checkpoint(const TrainCheckpoint& checkpoint, const std::string& path) const override;

  ProcessGrid& grid() { return *grid_; }
  // The tensor-parallel collectives of the last step's forwards and backwards (and, under
  // sequence parallelism, its gradient sum), in order: validation forwards are not in it.
  const std::vector<TpCollective>& step_ledger() const { return step_ledger_; }
  TpShardModel& shard_model() { return *model_; }

 private:
  // The shard as built for the CPU, or (with device_chunks_) wrapped to compute on the GPU.
  std::unique_ptr<TpShardModel> on_device(std::unique_ptr<TpShardModel> shard, const DeviceChunkStorage& storage,
                                          const std::string& precision);

  Communicator& world_;
  std::unique_ptr<ProcessGrid> grid_;
  bool sequence_parallel_ = false;
  TpShardModel* model_ = nullptr;         // the shard make_model built (owned by the trainer)
  DistributedOptimizer* zero_ = nullptr;  // --zero 1: the wrapper around model_ the trainer drives
  int zero_stage_ = 0;
  DeviceTpChunkFactory device_chunks_;  // --device cuda: the shard's GPU half
  CommStats tp_before_, dp_before_;
  StepCommReport report_;
  std::vector<TpCollective> step_ledger_;
};

}  // namespace scalelab
