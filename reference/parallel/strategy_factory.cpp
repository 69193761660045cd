// The registry of parallel strategies. A stage adds its strategy here, nowhere else (05 pipeline, 06 tensor parallel,
// 07 ZeRO).
#include "parallel/strategy_factory.hpp"

#include "core/error.hpp"
#include "dist/pipeline_strategy.hpp"
#include "dist/tp_strategy.hpp"
#include "dist/zero_strategy.hpp"
#include "train/single_device.hpp"

namespace scalelab {

namespace {

// ZeRO shards the data-parallel group's state; in this build that group is the world.
void refuse_zero_compositions(const ParallelOptions& p) {
  if (p.zero == 0) return;
  const std::string zero = "--zero " + std::to_string(p.zero);
  // Refused by design, as DeepSpeed refuses it: a pipeline runs every micro-batch's backward into
  // the same gradients, and ZeRO-2 would reduce-scatter (and ZeRO-3 regather the parameters) once
  // per micro-batch per stage, multiplying the traffic by m for nothing.
  require(p.pp == 1 || p.zero == 1, "zero",
          zero + " with --pp " + std::to_string(p.pp) +
              ": a pipeline accumulates every micro-batch's gradients, which ZeRO-2 and -3 would shard and "
              "reduce once per micro-batch (m times the traffic; DeepSpeed refuses this combination too)",
          "drop --pp to use ZeRO-" + std::to_string(p.zero) +
              ", or drop --zero to keep the pipeline (real systems pair a pipeline with ZeRO-1, Megatron-LM's "
              "distributed optimizer, which this kit does not build yet)");
  require(p.tp == 1 && p.pp == 1, "zero",
          zero + " with --tp " + std::to_string(p.tp) + " --pp " + std::to_string(p.pp) +
              ": ZeRO does not compose with tensor or pipeline parallelism in this build yet (the planner, "
              "scalelab plan, prices these layouts)",
          "use --zero with data parallelism alone (--tp 1 --pp 1)");
}

}  // namespace

void check_parallel_options(const TrainOptions& o, int world_size) {
  o.validate(world_size);
  refuse_zero_compositions(o.parallel);
}

StrategyFactory make_strategy_factory(Communicator* world, GradCommFactory grad_comm) {
  return [world, grad_comm](const TrainOptions& o) -> std::unique_ptr<ParallelStrategy> {
    const int world_size = world ? world->size() : 1;
    check_parallel_options(o, world_size);
    if (o.parallel.pp > 1) {
      require(world != nullptr, "pp", "a pipeline needs a communicator, and this run has none",
              "start the run through scalelab train (mpirun -np N for N ranks)");
      return std::make_unique<PipelineStrategy>(*world, o);
    }
    if (o.parallel.tp > 1) {
      require(world != nullptr, "tp", "tensor parallelism needs a communicator, and this run has none",
              "start the run through scalelab train (mpirun -np N for N ranks)");
      return std::make_unique<TensorParallelStrategy>(*world, o);
    }
    if (o.parallel.zero > 0) {
      require(world != nullptr, "zero", "ZeRO needs a communicator, and this run has none",
              "start the run through scalelab train (mpirun -np N for N ranks)");
      return std::make_unique<ZeroStrategy>(*world, o);
    }
    const int d = o.data_parallel_size(world_size);
    const bool ddp = d > 1 || o.parallel.ddp == "naive" || o.parallel.ddp == "bucketed";
    if (!ddp) return std::make_unique<SingleDevice>();
    require(world != nullptr, "ddp", "data parallelism needs a communicator, and this run has none",
            "start the run through scalelab train (mpirun -np N for N ranks)");
    // Without tp and pp every rank is a replica: the data-parallel group is the world.
    return std::make_unique<DdpStrategy>(*world, ddp_options_from(o.parallel), nullptr, grad_comm);
  };
}

}  // namespace scalelab
