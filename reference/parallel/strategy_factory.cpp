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

// ZeRO shards the data-parallel group's state. Alone it is stage 07's ZeroStrategy; inside a
// pipeline or a tensor-parallel layout, stage 1 is the distributed optimizer those strategies run.
void refuse_zero_compositions(const ParallelOptions& p) {
  if (p.zero == 0 || (p.tp == 1 && p.pp == 1)) return;
  const std::string zero = "--zero " + std::to_string(p.zero);
  // Refused by design, as DeepSpeed refuses it: a pipeline runs every micro-batch's backward into
  // the same gradients, and ZeRO-2 would reduce-scatter (and ZeRO-3 regather the parameters) once
  // per micro-batch per stage, multiplying the traffic by m for nothing.
  require(p.pp == 1 || p.zero == 1, "zero",
          zero + " with --pp " + std::to_string(p.pp) +
              ": a pipeline accumulates every micro-batch's gradients, which ZeRO-2 and -3 would shard and "
              "reduce once per micro-batch (m times the traffic; DeepSpeed refuses this combination too)",
          "use --zero 1 with a pipeline (Megatron-LM's distributed optimizer), or drop --pp to use ZeRO-" +
              std::to_string(p.zero));
  require(p.zero == 1, "zero",
          zero + " with --tp " + std::to_string(p.tp) +
              ": ZeRO-2 and -3 inside tensor parallelism are not built yet (scalelab plan prices them)",
          "use --zero 1 with --tp (the distributed optimizer), or --tp 1 for ZeRO-" + std::to_string(p.zero));
  const std::string layout = p.pp > 1 ? "--pp " + std::to_string(p.pp) : "--tp " + std::to_string(p.tp);
  require(!p.offload, "offload",
          "--offload with " + layout +
              ": the distributed optimizer keeps its shard in the model's memory in this build",
          "drop --offload, or use --zero 1 --offload with data parallelism alone");
  require(!p.reshard, "reshard",
          "--reshard with " + layout +
              ": this layout writes one whole-model checkpoint, which any layout resumes without --reshard",
          "drop --reshard");
}

}  // namespace

void check_parallel_options(const TrainOptions& o, int world_size) {
  o.validate(world_size);
  refuse_zero_compositions(o.parallel);
}

StrategyFactory make_strategy_factory(Communicator* world, DeviceFactories device) {
  return [world, device](const TrainOptions& o) -> std::unique_ptr<ParallelStrategy> {
    const int world_size = world ? world->size() : 1;
    check_parallel_options(o, world_size);
    if (o.parallel.pp > 1) {
      require(world != nullptr, "pp", "a pipeline needs a communicator, and this run has none",
              "start the run through scalelab train (mpirun -np N for N ranks)");
      return std::make_unique<PipelineStrategy>(
          *world, o, PipelineDevice{device.pipeline_chunks, device.tp_chunks, device.pipeline_messages});
    }
    if (o.parallel.tp > 1) {
      require(world != nullptr, "tp", "tensor parallelism needs a communicator, and this run has none",
              "start the run through scalelab train (mpirun -np N for N ranks)");
      return std::make_unique<TensorParallelStrategy>(*world, o, device.tp_chunks);
    }
    if (o.parallel.zero > 0) {
      require(world != nullptr, "zero", "ZeRO needs a communicator, and this run has none",
              "start the run through scalelab train (mpirun -np N for N ranks)");
      return std::make_unique<ZeroStrategy>(*world, o, device.zero_model);
    }
    const int d = o.data_parallel_size(world_size);
    const bool ddp = d > 1 || o.parallel.ddp == "naive" || o.parallel.ddp == "bucketed";
    if (!ddp) return std::make_unique<SingleDevice>();
    require(world != nullptr, "ddp", "data parallelism needs a communicator, and this run has none",
            "start the run through scalelab train (mpirun -np N for N ranks)");
    // Without tp and pp every rank is a replica: the data-parallel group is the world.
    return std::make_unique<DdpStrategy>(*world, ddp_options_from(o.parallel), nullptr, device.grad_comm);
  };
}

}  // namespace scalelab
