// Stage 05 at the trainer's seam: pipeline parallelism, alone or with data parallelism on one
// grid [pp][dp] (comm/grid.hpp). Each pipeline rank builds only its model stages
// (dist/pipeline_stage_model.hpp) and runs its schedule's action list
// (schedule/pipeline_schedule.hpp) with the executor (dist/pipeline_executor.hpp) over its
// replica's rows. After the step's last backward on every rank, and only then:
//   1. the two copies of the tied wte (model stage 0's embedding, the last model stage's LM
//      head) exchange gradients and both add them, so they stay bitwise equal;
//   2. with dp > 1, one all-reduce of the rank's flat gradients over its data-parallel group;
//      with --zero 1, a reduce-scatter instead, each replica updating its shard of the stage and
//      all-gathering the parameters after the step (dist/distributed_optimizer.hpp).
// The optimizer clips with the gradient norm over all stages (the head's wte copy counted once).
//
// With --tp T each stage is split over T ranks (tp x pp, Megatron's 3D layout with dp): the grid
// is [pp][dp][tp], a stage's chunks are tensor-parallel splits (dist/tp_model.hpp), each tp rank
// exchanges its own activations with the same tp rank of the neighbouring stages, and under
// sequence parallelism the replicated tensors' gradients are summed over tp before step 1.
//
// With --device cuda each chunk computes on the GPU (a DeviceChunkFactory's chunks: see
// dist/pipeline_stage_model.hpp), and the messages between them are device memory on a
// communicator of the pipeline group that moves it: NCCL with --backend nccl (GPU to GPU, each
// rank running its list with the sends NCCL would hang on delayed: schedule/rendezvous.hpp),
// else host staging over MPI. The sums above and the optimizer stay on the host, where the flat
// buffers are (ZeRO-Offload's split).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/grid.hpp"
#include "dist/distributed_optimizer.hpp"
#include "dist/pipeline_executor.hpp"
#include "dist/pipeline_stage_model.hpp"
#include "dist/timeline.hpp"
#include "schedule/pipeline_schedule.hpp"
#include "schedule/pipeline_sim.hpp"
#include "train/parallel_strategy.hpp"

namespace scalelab {

// The bubble of the last step three ways: measured on the timeline of every rank's compute
// actions; the schedule simulated (schedule/pipeline_sim.hpp) with the step's measured median cost
// of each action kind; and the textbook formula with those costs. All as a fraction of the total
// time, idle / (p * makespan). And each pipeline rank's activation memory.
struct PipelineBubble {
  double measured = 0, scheduled = 0, formula = 0;
  ActionCosts costs;                          // medians over all ranks, seconds (transfer 0)
  std::vector<double> peak_in_flight;         // per pipeline rank, in the last step
  std::vector<double> activation_peak_bytes;  // per pipeline rank, the run's peak so far
};

// The messages of chunks computing on a device: a communicator of the pipeline group that moves
// device memory, and the memory they take.
struct PipelineMessages {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<DeviceMessageMemory> memory;
};
// Collective over pp (the host communicator of the pipeline group); the memory counted in
// `device` (the stage's tracker of the device's bytes, which outlives the result).
using PipelineMessagesFactory = std::function<PipelineMessages(Communicator& pp, MemoryTracker* device)>;

// What a pipeline computing on a device is given (scalelab train's, from CUDA; the tests' twins).
struct PipelineDevice {
  DeviceChunkFactory chunks;         // a stage's chunks
  DeviceTpChunkFactory tp_chunks;    // with --tp: a stage's tensor-parallel shards
  PipelineMessagesFactory messages;  // the messages between them
};

class PipelineStrategy final : public ParallelStrategy {
 public:
  // Collective over world: makes the [pp][dp] grid. Throws ConfigError (the same on every rank)
  // for settings a pipeline does not support (zb-h1 with checkpointing; on a GPU: zb-h1, no
  // device chunks or messages, with --tp no tp_chunks). With --backend nccl the rank runs its
  // list from rendezvous_schedules.
  PipelineStrategy(Communicator& world, const TrainOptions& options, PipelineDevice device = {});
  ~PipelineStrategy() override;

  std::string describe() const override;
  int data_parallel_size() const override { return grid_->shape().dp; }
  std::unique_ptr<TrainModel> make_model(const GPTConfig& config, const std::string& precision, MemoryTracker* tracker,
                                         const TrainModelFactory& whole) override;
  void attach(const StrategyContext& context) override;
  void begin_step(const GlobalBatch& batch) override;
  double run_micro_batches(TrainModel& model, const GlobalBatch& batch, double loss_scale) override;
  void sync_gradients(TrainModel& model) override;
  double mean_loss(double local_loss) override;
  TrainModel::StepOutcome optimizer_step(TrainModel& model, AdamW& optimizer, double lr, double grad_scale,
                                         double clip) override;
  double evaluate(TrainModel& model, const int* inputs, const int* targets, int rows, int T) override;
  StepCommReport step_report() const override { return report_; }
  const Timeline* timeline() const override { return &timeline_; }
  // The pipeline ranks of data-parallel replica 0 gather the whole model into one file: the
  // weights, or the training state (which a run with any layout resumes from).
  void save_weights(const TrainModel& model, const std::string& path) const override;
  void save_checkpoint(const TrainCheckpoint& checkpoint, const std::string& path) const override;
  // This stage's tensors of whole-model values (its shard of them under --zero 1).
  std::vector<float> held_values(const TrainModel& model, const std::vector<float>& whole) const override;

  const PipelineShape& shape() const { return shape_; }
  ProcessGrid& grid() { return *grid_; }
  const RankSchedule& schedule() const { return schedule_; }
  const PipelineStepStats& last_step() const { return executor_->stats(); }
  // The communicator the messages travel on: the pipeline group's, or on a device its device one.
  Communicator& messages() { return messages_.comm ? *messages_.comm : grid_->pp(); }
  // Collective over the pipeline group (every rank gets the same): from the last step.
  const PipelineBubble& bubble() const { return bubble_; }
  std::string report() const override;
  PipelineStageModel& stage() { return *stage_; }

 private:
  // The pp group's sum of a value that only the last model stage's rank knows (the loss).
  double from_last_stage(double value);
  // Gathers every rank's measured compute actions and fills bubble_ (collective over pp).
  void measure_bubble();
  // The ranks that hold one replica of the model between them: the pipeline group, or with
  // tensor parallelism every (pp, tp) rank of this replica. The gradient norm is summed over
  // them, and saving gathers the whole model from replica 0's.
  Communicator& model_ranks() const { return model_group_ ? *model_group_ : grid_->pp(); }

  Communicator& world_;
  std::unique_ptr<ProcessGrid> grid_;
  PipelineShape shape_;
  RankSchedule schedule_;
  MemoryTracker* tracker_ = nullptr;
  PipelineStageModel* stage_ = nullptr;   // the model make_model built (owned by the trainer)
  DistributedOptimizer* zero_ = nullptr;  // --zero 1: the wrapper around stage_ the trainer drives
  int zero_stage_ = 0;
  bool sequence_parallel_ = false;
  PipelineDevice device_;                      // --device cuda: the GPU's chunks and messages
  PipelineMessages messages_;                  // chunks on a device: their messages' communicator and memory
  std::unique_ptr<Communicator> model_group_;  // tp > 1: this replica's (pp, tp) ranks
  IndexRanges counted_elsewhere_;              // the stage's (PipelineStageModel::counted_elsewhere), for the norm
  std::unique_ptr<PipelineExecutor> executor_;
  Timeline timeline_;
  int batch_rows_ = 0;
  CommStats pp_before_, messages_before_, dp_before_, tp_before_;
  // The communicators of their own that the stage's tensor-parallel chunks run their collectives
  // on (chunks on a GPU); empty where they run on the group's host communicator.
  std::vector<const Communicator*> device_tp_comms_;
  std::uint64_t device_tp_before_ = 0;  // device_tp_bytes() at the step's start
  // Bytes the chunks sent on device_tp_comms_ so far.
  std::uint64_t device_tp_bytes() const;
  StepCommReport report_;
  PipelineBubble bubble_;
};

}  // namespace scalelab
