// Composed layouts (issue 15), through the trainer as `scalelab train` runs them:
//
// ZeRO-1 inside a pipeline and inside tensor parallelism (the distributed optimizer,
// dist/distributed_optimizer.hpp), `--pp 2 --zero 1` and `--tp 2 --zero 1` on 4 ranks (2 model
// ranks x 2 replicas), against the same layout without ZeRO (stage 05's and 06's own tests hold
// those against stages 00/01). With d = 2 the reduce-scatter adds the same two floats the
// all-reduce adds (a + b == b + a), so without clipping the parameters are bitwise equal. With
// clipping the norm is a sum of the shards' partial sums, another order of the same doubles:
// within 1e-6 relative.
//
// Tensor parallelism inside pipeline stages, `--tp 2 --pp 2` on 4 ranks, and the whole stack
// `--dp 2 --tp 2 --pp 2 --zero 1 --sequence-parallel --checkpoint sqrt` on 8, in fp32 and in
// bf16 (then against stage 03, the whole mixed-precision model), against stage 01
// (one process, the same batch in dp x m micro-batches): the row-parallel reductions and the
// tied embedding's sum add in another order, so the loss within 1e-5 relative and each tensor
// after 3 AdamW steps within 1e-3 relative norm error (the bound stage 06's own test states:
// AdamW divides by sqrt(v), which magnifies last-bit differences where a gradient is tiny).
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "compare.hpp"
#include "core/error.hpp"
#include "ddp_fixtures.hpp"
#include "dist/distributed_optimizer.hpp"
#include "dist/pipeline_strategy.hpp"
#include "host_copy_chunk.hpp"
#include "host_copy_tp_chunk.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "mixed_reference.hpp"
#include "model/params.hpp"
#include "parallel/strategy_factory.hpp"
#include "resume_runs.hpp"
#include "train/trainer.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {

constexpr int kSteps = 3;
// Mixed precision against stage 03 (one process): tensor parallelism's bounds (test_tp_mixed.cpp).
const MasterBounds kMixedBounds{3e-2, 0.3};

struct Layout {
  const char* name;
  int tp, pp;
};
constexpr Layout kLayouts[] = {{"pp 2 x dp 2", 1, 2}, {"tp 2 x dp 2", 2, 1}};

TrainOptions options(Communicator& world, const Layout& l, int zero) {
  TrainOptions o;
  o.config = "tiny";
  o.shape.num_layers = 4;
  o.batch = 8;
  o.steps = kSteps;
  o.seed = 1234;
  o.data = tiny_token_shard(world, "scalelab_compose.bin");
  o.parallel.tp = l.tp;
  o.parallel.pp = l.pp;
  o.parallel.micro_batches = 2;
  o.parallel.zero = zero;
  return o;
}

// The rank's whole part of the model (a stage, a shard): under ZeRO-1 the wrapped model's.
const TrainModel& part(const Trainer& t) {
  const auto* z = dynamic_cast<const DistributedOptimizer*>(&t.model());
  return z ? z->inner() : t.model();
}

std::size_t dp_rank(const Communicator& world, const Layout& l) {
  // The grid is [pp][dp][tp] with tp fastest (comm/grid.hpp).
  return static_cast<std::size_t>((world.rank() / l.tp) % (world.size() / (l.tp * l.pp)));
}

}  // namespace

TEST_CASE("ZeRO-1 inside pp and tp: the parameters of the same layout without ZeRO", "[compose_zero1]") {
  Communicator& world = test_world();
  if (world.size() != 4) return;
  for (const Layout& l : kLayouts)
    for (const double clip : {0.0, 0.05}) {
      INFO(where(world) << ", " << l.name << ", clip " << clip);
      TrainOptions plain_o = options(world, l, 0), zero_o = options(world, l, 1);
      plain_o.adamw.grad_clip = zero_o.adamw.grad_clip = clip;
      MemoryTracker t1, t2;
      Trainer plain(plain_o, &t1, {}, make_strategy_factory(&world));
      Trainer zero(zero_o, &t2, {}, make_strategy_factory(&world));
      REQUIRE(dynamic_cast<DistributedOptimizer*>(&zero.model()) != nullptr);
      for (int s = 0; s < kSteps; ++s) {
        const StepStats a = plain.step(), b = zero.step();
        INFO("step " << s << ": loss " << b.loss << " with ZeRO-1, " << a.loss << " without");
        CHECK(a.loss == b.loss);  // the update differs at most in the clip factor's last bits
        if (clip > 0) CHECK(a.grad_norm == Approx(b.grad_norm).epsilon(1e-12));
      }
      const std::size_t n = part(plain).num_params();
      REQUIRE(part(zero).num_params() == n);
      if (clip == 0)
        CHECK_MATCH(compare_bitwise("this rank's parameters, ZeRO-1 vs none", part(zero).master_params(),
                                    part(plain).master_params(), n));
      else
        CHECK_MATCH(compare_close("this rank's parameters, ZeRO-1 vs none (clipped)", part(zero).master_params(),
                                  part(plain).master_params(), n, 1e-6, 1e-7));
    }
}

TEST_CASE("ZeRO-1 inside pp and tp: AdamW state 8 n/d bytes per rank, and the bytes of the all-reduce",
          "[compose_zero1_state]") {
  Communicator& world = test_world();
  if (world.size() != 4) return;
  for (const Layout& l : kLayouts) {
    INFO(where(world) << ", " << l.name);
    MemoryTracker t1, t2;
    Trainer plain(options(world, l, 0), &t1, {}, make_strategy_factory(&world));
    Trainer zero(options(world, l, 1), &t2, {}, make_strategy_factory(&world));
    plain.step();
    zero.step();
    // This rank's part of the model has n parameters; replica r of d keeps AdamW's m and v for
    // its shard: n/d elements, the first n mod d shards one more (comm/partition.hpp's cut).
    const std::size_t n = part(plain).num_params();
    const std::size_t d = 2, r = dp_rank(world, l);
    const std::size_t shard = n / d + (r < n % d ? 1 : 0);
    INFO("n = " << n << ", dp rank " << r << ", shard " << shard);
    CHECK(t2.current(MemCategory::kParams) == 4 * n);
    CHECK(t2.current(MemCategory::kGrads) == 4 * n);
    CHECK(t2.current(MemCategory::kOptimizer) == 8 * shard);
    CHECK(t1.current(MemCategory::kOptimizer) == 8 * n);
    // The reduce-scatter's receive buffer is the one buffer ZeRO-1 adds.
    CHECK(t2.current(MemCategory::kComm) == t1.current(MemCategory::kComm) + 4 * shard);
    // A ring all-reduce is a reduce-scatter and an all-gather: the same bytes per rank.
    CHECK(zero.strategy().step_report().bytes_sent == plain.strategy().step_report().bytes_sent);
  }
}

TEST_CASE("ZeRO-1 inside a pipeline: saved after 2 steps and resumed for 2 equals 4 steps, and the file is whole",
          "[compose_zero1_resume]") {
  Communicator& world = test_world();
  if (world.size() != 4) return;
  const Layout& l = kLayouts[0];
  INFO(where(world) << ", " << l.name);
  const std::string state = per_world_temp_path(world, "scalelab_compose_resume.state");
  TrainOptions o = options(world, l, 1);
  o.steps = 4;
  const auto runs = run_straight_and_resumed(o, state, make_strategy_factory(&world));
  CHECK_MATCH(compare_bitwise("this stage's parameters, resumed vs straight", part(*runs->resumed).master_params(),
                              part(*runs->straight).master_params(), part(*runs->straight).num_params()));
  // The file holds the whole model's state: the same as the run without ZeRO writes.
  TrainOptions plain_o = options(world, l, 0);
  plain_o.steps = 4;
  MemoryTracker t4;
  Trainer plain(plain_o, &t4, {}, make_strategy_factory(&world));
  for (int i = 0; i < 2; ++i) plain.step();
  const std::string plain_state = state + ".plain";
  plain.save_checkpoint(plain_state);
  const TrainCheckpoint a = load_checkpoint(state), b = load_checkpoint(plain_state);
  REQUIRE(a.params.size() == ParamLayout(o.model_config()).num_params());
  CHECK_MATCH(compare_bitwise("saved params, ZeRO-1 vs none", a.params.data(), b.params.data(), a.params.size()));
  CHECK_MATCH(compare_bitwise("saved Adam m, ZeRO-1 vs none", a.adam_m.data(), b.adam_m.data(), a.adam_m.size()));
  CHECK_MATCH(compare_bitwise("saved Adam v, ZeRO-1 vs none", a.adam_v.data(), b.adam_v.data(), a.adam_v.size()));
}

namespace {

// This rank's part of the model in fp32 after a run: its parameters, or master weights; under
// ZeRO-1 in mixed precision every replica's master shard put together (collective over dp).
std::vector<float> part_values(Trainer& t) {
  if (auto* z = dynamic_cast<DistributedOptimizer*>(&t.model())) return z->gathered_params();
  return {t.model().master_params(), t.model().master_params() + t.model().num_params()};
}

// One run of `o` on this job's ranks against stage 01 on one process (in o's precision: stage 03
// for bf16): the loss of every step, and this rank's parameters (its pipeline stage's tensors,
// split when tensor parallel) after them. fp32 within loss_tol relative per step and 1e-3
// relative norm per tensor; mixed precision per tensor as tests/dist/mixed_reference.hpp says,
// with test_tp_mixed.cpp's bounds (the row-parallel partial sums rounded to half), and the loss
// within 5e-4 relative (measured up to 3.2e-5 over 3 steps, tp x pp and dp x tp x pp).
void check_against_stage01(Communicator& world, const TrainOptions& o, const std::string& what,
                           double loss_tol = 1e-5) {
  INFO(where(world) << ", " << what);
  MemoryTracker t1, t2;
  TrainOptions single = o;
  single.parallel = ParallelOptions{};
  single.grad_accum = o.data_parallel_size(world.size()) * o.micro_batches();
  Trainer want(single, &t1);
  Trainer got(o, &t2, {}, make_strategy_factory(&world));
  for (int s = 0; s < o.steps; ++s) {
    const double a = want.step().loss, b = got.step().loss;
    INFO("step " << s << ": loss " << b << ", stage 01 " << a);
    CHECK(std::fabs(b - a) <= loss_tol * std::fabs(a));
  }
  auto& pipeline = dynamic_cast<PipelineStrategy&>(got.strategy());
  const std::vector<float> whole(want.model().master_params(),
                                 want.model().master_params() + want.model().num_params());
  const std::vector<float> expected = pipeline.stage().held_values(whole);
  const std::vector<float> mine = part_values(got);
  REQUIRE(expected.size() == mine.size());
  for (const auto& tensor : part(got).layout().tensors()) {
    const float *g = mine.data() + tensor.offset, *w = expected.data() + tensor.offset;
    if (o.precision != "fp32") {
      // A tensor-parallel piece of c_attn.bias holds its q, k and v thirds of Cl = C / t each.
      check_master_after(tensor.name, g, w, tensor.numel, static_cast<int>(tensor.numel / 3), o.adamw.lr, kMixedBounds);
      continue;
    }
    const double err = relative_norm_error(g, w, tensor.numel);
    INFO("params after " << o.steps << " steps, " << tensor.name << ": relative norm error " << err);
    CHECK(err <= 1e-3);
  }
}

}  // namespace

TEST_CASE("tp x pp: tensor-parallel pipeline stages train as stage 01", "[compose_tp_pp]") {
  Communicator& world = test_world();
  if (world.size() != 4) return;
  for (const char* schedule : {"1f1b", "afab", "interleaved:2"})
    for (bool sp : {false, true}) {
      TrainOptions o = options(world, {"tp 2 x pp 2", 2, 2}, 0);
      o.parallel.schedule = schedule;
      o.parallel.sequence_parallel = sp;
      o.parallel.micro_batches = 4;
      check_against_stage01(world, o, std::string("tp 2 x pp 2, ") + schedule + (sp ? ", sequence parallel" : ""));
    }
}

TEST_CASE("dp x tp x pp with ZeRO-1, sequence parallelism and sqrt checkpointing trains as stage 01", "[compose_3d]") {
  Communicator& world = test_world();
  if (world.size() != 8) return;
  TrainOptions o = options(world, {"dp 2 x tp 2 x pp 2", 2, 2}, 1);
  o.parallel.sequence_parallel = true;
  o.checkpoint = CheckpointPolicy::parse("sqrt");
  o.adamw.grad_clip = 1.0;
  check_against_stage01(world, o, "dp 2 x tp 2 x pp 2, ZeRO-1, sequence parallel, sqrt checkpointing, clip 1");
}

TEST_CASE("tp x pp with zb-h1: the split backward gives 1f1b's parameters bit for bit, fp32 and bf16",
          "[compose_tp_pp]") {
  // The weight pass adds what the whole backward would have, in the same order per micro-batch
  // (in bf16 rounding each element once per micro-batch either way); the collectives all run in
  // the input pass, in 1f1b's order.
  Communicator& world = test_world();
  if (world.size() != 4) return;
  for (const char* precision : {"fp32", "bf16"})
    for (bool sp : {false, true}) {
      INFO(where(world) << ", tp 2 x pp 2, " << precision << (sp ? ", sequence parallel" : ""));
      TrainOptions a = options(world, {"tp 2 x pp 2", 2, 2}, 0);
      a.precision = precision;
      a.parallel.sequence_parallel = sp;
      a.parallel.micro_batches = 4;
      TrainOptions b = a;
      b.parallel.schedule = "zb-h1";
      MemoryTracker t1, t2;
      Trainer one(a, &t1, {}, make_strategy_factory(&world));
      Trainer zb(b, &t2, {}, make_strategy_factory(&world));
      for (int s = 0; s < kSteps; ++s) CHECK(one.step().loss == zb.step().loss);
      const std::vector<float> x = part_values(one), y = part_values(zb);
      REQUIRE(x.size() == y.size());
      CHECK_MATCH(compare_bitwise("this rank's parameters after 3 steps, zb-h1 vs 1f1b", y.data(), x.data(), x.size()));
    }
}

TEST_CASE("tp x pp in bf16: mixed-precision tensor-parallel pipeline stages train as stage 03", "[compose_tp_pp]") {
  Communicator& world = test_world();
  if (world.size() != 4) return;
  for (bool sp : {false, true}) {
    TrainOptions o = options(world, {"tp 2 x pp 2", 2, 2}, 0);
    o.precision = "bf16";
    o.parallel.sequence_parallel = sp;
    o.parallel.micro_batches = 4;
    check_against_stage01(world, o, std::string("tp 2 x pp 2, bf16") + (sp ? ", sequence parallel" : ""), 5e-4);
  }
}

TEST_CASE("dp x tp x pp with ZeRO-1, bf16, sequence parallelism and sqrt checkpointing trains as stage 03",
          "[compose_3d]") {
  Communicator& world = test_world();
  if (world.size() != 8) return;
  TrainOptions o = options(world, {"dp 2 x tp 2 x pp 2", 2, 2}, 1);
  o.precision = "bf16";
  o.parallel.sequence_parallel = true;
  o.checkpoint = CheckpointPolicy::parse("sqrt");
  o.adamw.grad_clip = 1.0;
  check_against_stage01(world, o, "dp 2 x tp 2 x pp 2, ZeRO-1, bf16, sequence parallel, sqrt checkpointing, clip 1",
                        5e-4);
}

TEST_CASE("dp x tp x pp with ZeRO-1: saved after 2 steps and resumed for 2 equals 4 steps; the weights file is whole",
          "[compose_3d_resume]") {
  Communicator& world = test_world();
  if (world.size() != 8) return;
  INFO(where(world));
  TrainOptions o = options(world, {"dp 2 x tp 2 x pp 2", 2, 2}, 1);
  o.parallel.sequence_parallel = true;
  o.steps = 4;
  const std::string state = per_world_temp_path(world, "scalelab_compose_3d.state");
  const std::string weights = per_world_temp_path(world, "scalelab_compose_3d.safetensors");
  const auto runs = run_straight_and_resumed(o, state, make_strategy_factory(&world));
  Trainer& straight = *runs->straight;
  CHECK_MATCH(compare_bitwise("this rank's split of its stage, resumed vs straight",
                              part(*runs->resumed).master_params(), part(straight).master_params(),
                              part(straight).num_params()));
  // The weights file holds the whole model: cut back to this rank's part, it is the rank's part.
  straight.save_weights(weights);
  std::vector<float> whole(ParamLayout(o.model_config()).num_params());
  load_weights(weights, o.model_config(), whole.data());
  const std::vector<float> mine = dynamic_cast<PipelineStrategy&>(straight.strategy()).stage().held_values(whole);
  REQUIRE(mine.size() == part(straight).num_params());
  CHECK_MATCH(compare_bitwise("this rank's part of the saved whole model vs its parameters", mine.data(),
                              part(straight).master_params(), mine.size()));
}

TEST_CASE(
    "tp x pp and dp x tp x pp on a device: the CPU layout's parameters bit for bit, with CPU twins of the GPU "
    "chunks",
    "[compose_device_path]") {
  // --device cuda: each tp x pp stage's chunk is a DeviceTpShardModel around its GPU half (here
  // tests/dist/host_copy_tp_chunk.hpp, the CPU shard on a second buffer), loaded before each step
  // and stored after it; the same arithmetic as the CPU layout, so the losses and this rank's
  // parameters after 3 steps are equal bit for bit, in fp32 and bf16, with 1f1b and interleaved,
  // with and without sequence parallelism.
  Communicator& world = test_world();
  if (world.size() != 4 && world.size() != 8) return;  // test_compose_mpi runs on 4 and 8 ranks
  const Layout l = world.size() == 8 ? Layout{"dp 2 x tp 2 x pp 2", 2, 2} : Layout{"tp 2 x pp 2", 2, 2};
  const StrategyFactory on_device = [&world](const TrainOptions& opts) -> std::unique_ptr<ParallelStrategy> {
    return std::make_unique<PipelineStrategy>(
        world, opts, PipelineDevice{HostCopyChunk::factory(), HostCopyTpChunk::factory(), twin_messages()});
  };
  const TrainModelFactory unused = [](const GPTConfig&, const std::string&,
                                      MemoryTracker*) -> std::unique_ptr<TrainModel> {
    throw Error("the pipeline builds its own stage");
  };
  struct Run {
    const char* precision;
    const char* schedule;
    bool sp;
  };
  for (const Run r : {Run{"fp32", "1f1b", false}, Run{"fp32", "interleaved:2", true}, Run{"bf16", "1f1b", true},
                      Run{"bf16", "interleaved:2", false}}) {
    INFO(where(world) << ", " << l.name << ", " << r.precision << ", " << r.schedule
                      << (r.sp ? ", sequence parallel" : ""));
    TrainOptions a = options(world, l, world.size() == 8 ? 1 : 0);
    a.precision = r.precision;
    a.parallel.schedule = r.schedule;
    a.parallel.sequence_parallel = r.sp;
    a.parallel.micro_batches = 4;
    TrainOptions b = a;
    b.device = "cuda";
    MemoryTracker t1, t2;
    Trainer cpu(a, &t1, {}, make_strategy_factory(&world));
    Trainer dev(b, &t2, unused, on_device);
    for (int s = 0; s < kSteps; ++s) {
      const StepStats want = cpu.step(), got = dev.step();
      CHECK(got.loss == want.loss);
      // The chunks' collectives run on communicators of their own (as on a GPU): every byte of
      // them, and the host's sum of the replicated gradients, still counted once.
      INFO("step " << s << ": bytes sent " << got.comm_bytes_sent << " on the device path, " << want.comm_bytes_sent
                   << " on the CPU");
      CHECK(got.comm_bytes_sent == want.comm_bytes_sent);
    }
    const std::vector<float> x = part_values(cpu), y = part_values(dev);
    REQUIRE(x.size() == y.size());
    CHECK_MATCH(
        compare_bitwise("this rank's parameters after 3 steps, device path vs CPU", y.data(), x.data(), x.size()));
    const auto& stage = dynamic_cast<PipelineStrategy&>(dev.strategy()).stage();
    REQUIRE(stage.device_memory() != nullptr);
    for (int c = 0; c < stage.chunk_count(); ++c) {
      const auto& shard = dynamic_cast<const DeviceTpShardModel&>(stage.chunk_at(c));
      const auto& twin = dynamic_cast<const HostCopyTpChunk&>(shard.chunk());
      CHECK(twin.loads() == kSteps);
      CHECK(twin.stores() == kSteps);
    }
  }
}
