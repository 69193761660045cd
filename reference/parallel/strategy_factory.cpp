// The registry of parallel strategies. A stage adds its strategy here, nowhere else (05 pipeline, 06 tensor parallel).
#include "parallel/strategy_factory.hpp"

#include "core/error.hpp"
#include "dist/pipeline_strategy.hpp"
#include "dist/tp_strategy.hpp"
#include "train/single_device.hpp"

namespace scalelab {

namespace {

// Settings that name a stage this build does not have yet: one clear refusal each.
void refuse_missing_stages(const ParallelOptions& p) {
  require(p.zero == 0, "zero", "ZeRO (--zero " + std::to_string(p.zero) + ") is stage 07, not built yet",
          "use --zero 0 (plain data parallelism)");
  require(!p.offload, "offload", "optimizer offload is stage 07, not built yet", "drop --offload");
}

}  // namespace

void check_parallel_options(const TrainOptions& o, int world_size) {
  o.validate(world_size);
  refuse_missing_stages(o.parallel);
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
