// What the pipeline tests share: a PipelineStrategy driven as the trainer drives it
// (strategy_harness.hpp), and the comparison of a stage's tensors with the whole model's by name.
#pragma once

#include <memory>
#include <string>

#include "compare.hpp"
#include "ddp_fixtures.hpp"
#include "dist/pipeline_strategy.hpp"
#include "host_device_copy.hpp"
#include "model/params.hpp"
#include "optim/adamw.hpp"
#include "parallel/strategy_factory.hpp"
#include "resume_runs.hpp"
#include "strategy_harness.hpp"

namespace scalelab_test {

struct PipelineHarness : StrategyHarness {
  std::unique_ptr<scalelab::PipelineStrategy> strategy;

  // pp ranks x (world / pp) replicas, `schedule` with m micro-batches of batch / (dp m) rows, in
  // `precision` (fp32, bf16 or fp16) with the loss multiplied by `scale` (the step divides it out),
  // with ZeRO-1 over the replicas when zero is 1 (the distributed optimizer). With `device` the
  // stage runs its --device cuda path with those chunks (host_copy_chunk.hpp: a CPU twin).
  PipelineHarness(scalelab::Communicator& world, const scalelab::GPTConfig& config, int pp, int m,
                  const std::string& schedule, int batch, int seq_len, std::uint64_t seed,
                  const std::string& precision = "fp32", double scale = 1.0, int zero = 0,
                  scalelab::DeviceChunkFactory device = {}, const std::string& backend = "auto") {
    if (device) options.device = "cuda";  // the stage's device path, with `device`'s chunks
    options.parallel.backend = backend;   // nccl: the lists NCCL runs (schedule/rendezvous.hpp)
    options.precision = precision;
    options.parallel.zero = zero;
    loss_scale = scale;
    options.batch = batch;
    options.seq_len = seq_len;
    options.parallel.pp = pp;
    options.parallel.micro_batches = m;
    options.parallel.schedule = schedule;
    options.adamw.lr = 1e-3;
    strategy = std::make_unique<scalelab::PipelineStrategy>(
        world, options, scalelab::PipelineDevice{std::move(device), {}, twin_messages()});
    start(*strategy, config, seed, {}, "pipeline test");
  }
  scalelab::PipelineStageModel& stage() { return strategy->stage(); }
};

// The resume tests' run: `tiny` with 4 layers, 8 rows in 2 micro-batches, 4 steps, over every
// rank as one pipeline, its tokens in `data_file` (per world size, ddp_fixtures.hpp).
inline scalelab::TrainOptions pipeline_resume_options(scalelab::Communicator& world, const std::string& data_file,
                                                      std::uint64_t seed) {
  scalelab::TrainOptions o;
  o.config = "tiny";
  o.shape.num_layers = 4;
  o.batch = 8;
  o.steps = 4;
  o.seed = seed;
  o.data = tiny_token_shard(world, data_file);
  o.parallel.pp = world.size();
  o.parallel.micro_batches = 2;
  return o;
}

// A run saved after 2 steps and resumed for 2 (resume_runs.hpp) against 4 straight steps: this
// stage's parameters (or master weights) bit for bit.
inline void check_resume(const scalelab::TrainOptions& o, const std::string& state, scalelab::Communicator& world) {
  const auto runs = run_straight_and_resumed(o, state, scalelab::make_strategy_factory(&world));
  const std::size_t n = runs->straight->model().num_params();
  REQUIRE(runs->resumed->model().num_params() == n);
  CHECK_MATCH(compare_bitwise("this stage's parameters (master weights), resumed vs straight",
                              runs->resumed->model().master_params(), runs->straight->model().master_params(), n));
}

// Each tensor this stage holds against the same tensor of a whole-model buffer `want` (laid out
// by ParamLayout(config)): bitwise, except the tied wte, within |a - b| <= rtol |b| + atol.
struct TensorMismatch {
  std::string message;
  bool ok = true;
};
inline TensorMismatch compare_stage_tensors(const std::string& what, const scalelab::GPTConfig& config,
                                            const scalelab::ParamLayout& stage_layout, const float* got,
                                            const std::vector<float>& want, double rtol, double atol) {
  const scalelab::ParamLayout whole(config);
  TensorMismatch r;
  for (const auto& t : stage_layout.tensors()) {
    const auto& w = whole.find(t.name);
    const bool tied = t.name == "transformer.wte.weight";
    const Comparison c = tied ? compare_close(what + " " + t.name, got + t.offset, want.data() + w.offset, t.numel,
                                              rtol, atol)
                              : compare_bitwise(what + " " + t.name, got + t.offset, want.data() + w.offset, t.numel);
    if (!c.ok) {
      r.ok = false;
      r.message += c.message() + "\n";
    }
  }
  return r;
}

}  // namespace scalelab_test
