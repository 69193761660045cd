// Training on one device (stages 00-03): the whole batch on this rank, in micro-batches when
// gradient accumulation asks for them (stage 01). The first ParallelStrategy, and the one the
// trainer uses when the options ask for no parallelism.
#pragma once

#include "train/parallel_strategy.hpp"

namespace scalelab {

class SingleDevice final : public ParallelStrategy {
 public:
  std::string describe() const override { return "single device"; }
  void attach(const StrategyContext& /*context*/) override {}
  double run_micro_batches(TrainModel& model, const GlobalBatch& batch, double loss_scale) override;
};

}  // namespace scalelab
