// Stage 07: what the ZeRO strategy (dist/zero_strategy.hpp) needs of its model beyond the
// trainer's TrainModel, so that one strategy drives both ZeRO models: the fp32 one
// (dist/zero_model.hpp, lab 07) and the mixed-precision one (dist/zero_mixed_model.hpp).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "core/memory.hpp"
#include "dist/timeline.hpp"
#include "dist/zero_shards.hpp"
#include "model/train_model.hpp"

namespace scalelab {

class ZeroTrainModel : public TrainModel {
 public:
  // What this rank owns, and the units that travel.
  virtual const ZeroShards& shards() const = 0;
  // Before a step's micro-batches: which backward pass reduce-scatters (stage 1: the last one).
  virtual void begin_step(int micro_batches) = 0;
  // The last step's compute and communication intervals.
  virtual const Timeline& timeline() const = 0;
  // Offload's second memory space (an empty tracker without offload).
  virtual const MemoryTracker& host_memory() const = 0;
  // Every fp32 parameter where this rank holds them all (fp32 stages 1 and 2); null otherwise.
  virtual const float* full_params() const = 0;
  // This rank's model state by the formula of its stage and precision (zero_shards.hpp).
  virtual ZeroStateBytes state_formula() const = 0;
  // The communicator whose counters hold the step's reduce-scatters and all-gathers: the
  // data-parallel group itself, or its device-memory twin for a model on a GPU.
  virtual const Communicator& step_communicator() const = 0;
};

// A ZeRO model on another device (the GPU's, kernels/dist/gpu_zero_model.hpp), which the library
// cannot name: the program hands the strategy a factory (apps/scalelab/device_models.cpp). dp is
// the host data-parallel group.
using ZeroModelFactory =
    std::function<std::unique_ptr<ZeroTrainModel>(const GPTConfig& config, int stage, const std::string& precision,
                                                  bool offload, Communicator& dp, MemoryTracker* tracker)>;

}  // namespace scalelab
