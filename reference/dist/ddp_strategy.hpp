// Stage 04 at the trainer's seam: data parallelism as a ParallelStrategy. Each of the d ranks of
// the data-parallel group runs its B/d rows of every batch (in the step's micro-batches), the
// DataParallel engine (dist/ddp.hpp) sums the gradients across the group, naive or in buckets
// overlapped with backward, and every rank applies the same update.
#pragma once

#include <functional>
#include <memory>

#include "comm/communicator.hpp"
#include "dist/ddp.hpp"
#include "train/parallel_strategy.hpp"

namespace scalelab {

// Makes the communicator that carries a model's gradients when they do not live in host memory
// (a GPU model's: NCCL, or host staging over `host`). The library cannot see CUDA, so the
// program supplies it (apps/scalelab/device_models.hpp).
using GradCommFactory = std::function<std::unique_ptr<Communicator>(Communicator& host, TrainModel& model)>;

// The DDP settings of a run's parallel options (--ddp auto means bucketed).
DdpOptions ddp_options_from(const ParallelOptions& parallel);

// Data parallelism's part of a step, shared by DDP (04) and ZeRO (07): this rank of `comm` runs
// its B/d rows of the batch in the step's micro-batches, each backward scaled by 1/d (so the sum
// over ranks is the mean loss's gradient); returns this rank's mean loss.
double run_data_parallel_rows(Communicator& comm, TrainModel& model, const GlobalBatch& batch, double loss_scale);
// The whole batch's mean loss from every rank's (collective over comm).
double data_parallel_mean_loss(Communicator& comm, double local_loss);

class DdpStrategy final : public ParallelStrategy {
 public:
  // comm: the data-parallel group in host memory (the replica check, the starting parameters,
  // the loss). The gradients go through grad_comm when given (same ranks, the gradients' memory
  // space), else through one made by make_grad_comm at attach(), else through comm.
  DdpStrategy(Communicator& comm, const DdpOptions& options, Communicator* grad_comm = nullptr,
              GradCommFactory make_grad_comm = {});
  ~DdpStrategy() override;

  std::string describe() const override;
  int data_parallel_size() const override { return comm_.size(); }
  // Collective: checks that every rank was started alike, then copies rank 0's parameters to
  // all (as PyTorch's DDP does).
  void attach(const StrategyContext& context) override;
  void begin_step(const GlobalBatch& batch) override;
  double run_micro_batches(TrainModel& model, const GlobalBatch& batch, double loss_scale) override;
  void sync_gradients(TrainModel& model) override;
  double mean_loss(double local_loss) override;
  StepCommReport step_report() const override { return report_; }
  const Timeline* timeline() const override;
  // Every replica holds the same weights and state: rank 0 writes them.
  void save_weights(const TrainModel& model, const std::string& path) const override;
  void save_checkpoint(const TrainCheckpoint& checkpoint, const std::string& path) const override;

  DataParallel& engine() { return *ddp_; }
  Communicator& gradient_communicator() { return *grad_comm_; }

 private:
  Communicator& comm_;
  DdpOptions options_;
  Communicator* grad_comm_;
  GradCommFactory make_grad_comm_;
  std::unique_ptr<Communicator> owned_grad_comm_;  // declared before ddp_: outlives it
  std::unique_ptr<DataParallel> ddp_;
  int batch_rows_ = 0;
  CommStats before_;  // the gradient communicator's counters when the step began
  StepCommReport report_;
};

}  // namespace scalelab
