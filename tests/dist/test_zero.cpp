// Stage 07, ZeRO stages 1-3, under mpiexec with d = 2, 3 and 4 ranks, against stage 04 (DDP,
// from the reference) on the same batch.
//
// Bitwise: with the hand-written ring on both sides and DDP in one bucket, every gradient
// element is summed along the ring in the same order (its owner's: dist/zero_shards.hpp), and
// AdamW is elementwise, so the parameters after 5 steps are equal bit for bit, for every stage,
// with one micro-batch and (stage 1, which adds micro-batches locally as DDP does) with two.
// Tolerance, and why: stages 2 and 3 with two micro-batches reduce each micro-batch and add the
// sums (DDP adds first, then reduces); the backend's built-in reduction picks its own order; a
// clipped step's norm is summed per shard. Each is a float reordering of relative size ~1e-7 in
// a gradient; after 5 AdamW steps a parameter whose gradient is near zero can move by up to lr
// from rounding alone (the pipeline test's argument), so parameters are compared by the relative
// norm of the difference per tensor, <= 1e-3. A missing reduction or a wrong shard is off by O(1).
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "batch.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "ddp_fixtures.hpp"
#include "dist/ddp_strategy.hpp"
#include "dist/zero_model.hpp"
#include "dist/zero_strategy.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "model/checkpoint_policy.hpp"
#include "parallel/strategy_factory.hpp"
#include "strategy_harness.hpp"
#include "train/trainer.hpp"
#include "world.hpp"
#include "zero_prefetch.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {

// V T C L NH: 4 blocks, so that a stage-3 rank holds a few blocks and gathers the others.
const prior::ModelShape kShape{65, 8, 32, 4, 4};
constexpr std::uint64_t kSeed = 17;
constexpr int kSteps = 5;

GPTConfig config() { return gpt_config_of_shape(kShape.V, kShape.T, kShape.C, kShape.L, kShape.NH, "zero-test"); }

struct RunSpec {
  int zero = 0;  // 0: DDP
  DdpOptions::Algorithm algorithm = DdpOptions::Algorithm::kRing;
  int micro_batches = 1;
  double clip = 0;
  bool offload = false;
  CheckpointPolicy checkpointing{};  // stage 02 under ZeRO: blocks gathered again for recomputes
};

std::string describe(const RunSpec& s) {
  return (s.zero ? "ZeRO-" + std::to_string(s.zero) + (s.offload ? "-Offload" : "") : std::string("DDP")) + ", " +
         (s.algorithm == DdpOptions::Algorithm::kRing ? "ring" : "builtin") + ", m " + std::to_string(s.micro_batches) +
         ", clip " + std::to_string(s.clip) +
         (s.checkpointing.kind == CheckpointPolicy::Kind::kNone ? "" : ", checkpointing " + s.checkpointing.describe());
}

TrainOptions options_for(Communicator& world, const RunSpec& s) {
  TrainOptions o;
  o.batch = 2 * world.size() * s.micro_batches;
  o.seq_len = kShape.T;
  o.grad_accum = s.micro_batches;
  o.adamw.lr = 1e-2;
  o.adamw.grad_clip = s.clip;
  o.parallel.zero = s.zero;
  o.parallel.offload = s.offload;
  o.parallel.allreduce = s.algorithm == DdpOptions::Algorithm::kRing ? "ring" : "builtin";
  return o;
}

// A harness with the strategy of `spec`: ZeRO, or DDP in one bucket (the ring then sums in
// ZeRO's order).
struct ZeroHarness : StrategyHarness {
  std::unique_ptr<ParallelStrategy> strategy;
  ZeroHarness(Communicator& world, const RunSpec& spec) {
    options = options_for(world, spec);
    if (spec.zero > 0) {
      strategy = std::make_unique<ZeroStrategy>(world, options);
    } else {
      DdpOptions d;
      d.algorithm = spec.algorithm;
      d.bucket_bytes = d.first_bucket_bytes = std::size_t(1) << 30;
      strategy = std::make_unique<DdpStrategy>(world, d);
    }
    start(*strategy, config(), kSeed, spec.checkpointing, "zero test");
  }
  ZeroModel& zero() { return dynamic_cast<ZeroModel&>(*model); }
  void step(const Batch& b) {
    forward_backward(b.tokens, b.targets);
    strategy->optimizer_step(*model, *optimizer, options.adamw.lr, 1.0, options.adamw.grad_clip);
  }
};

// The whole parameter buffer after kSteps steps on fixed random batches.
std::vector<float> params_after(Communicator& world, const RunSpec& spec) {
  ZeroHarness h(world, spec);
  for (int s = 0; s < kSteps; ++s) h.step(random_batch(kShape.V, h.options.batch, kShape.T, 100 + s));
  const std::size_t n = ParamLayout(config()).num_params();
  std::vector<float> whole(n);
  if (spec.zero == 0) {
    std::copy(h.model->master_params(), h.model->master_params() + n, whole.begin());
  } else {
    world.all_gather(h.model->master_params(), whole.data(), n, DataType::kFloat32);  // the shards are its cut
  }
  return whole;
}

void check_close_per_tensor(const std::vector<float>& got, const std::vector<float>& want) {
  const ParamLayout layout(config());
  for (const ParamTensor& t : layout.tensors()) {
    const double err = relative_norm_error(got.data() + t.offset, want.data() + t.offset, t.numel);
    INFO(t.name << ": relative norm error " << err);
    CHECK(err <= 1e-3);
  }
}

}  // namespace

TEST_CASE("a unit's pieces are the parts of it inside each rank's shard, at even and uneven splits",
          "[graded][zero_pieces]") {
  Communicator& world = test_world();
  INFO(where(world));
  // Against the definition, element by element: element i of the flat buffer belongs to the
  // rank whose shard holds it, so piece r of unit [begin, end) is the count of its elements
  // owned by ranks < r, up to those owned by rank r.
  for (std::size_t count : {std::size_t(12), std::size_t(13), std::size_t(53216)})
    for (int d : {1, 2, 3, 4, 5}) {
      const BlockPartition shards{count, d};
      const std::size_t step = std::max<std::size_t>(1, count / 7);
      for (std::size_t begin = 0; begin < count; begin += step)
        for (std::size_t end = begin; end <= count; end += std::max<std::size_t>(1, step / 2 + 1)) {
          const Pieces p = Pieces::of_range(shards, begin, end);
          std::vector<std::size_t> owned(static_cast<std::size_t>(d), 0);
          for (std::size_t i = begin; i < end; ++i) {
            int owner = 0;
            while (i >= shards.offset(owner) + shards.size(owner)) ++owner;
            ++owned[static_cast<std::size_t>(owner)];
          }
          std::size_t at = 0;
          bool same = p.parts() == d && p.count() == end - begin;
          for (int r = 0; r < d && same; ++r) {
            same = p.offset(r) == at && p.size(r) == owned[static_cast<std::size_t>(r)];
            at += owned[static_cast<std::size_t>(r)];
          }
          INFO("unit [" << begin << ", " << end << ") of " << count << " elements over " << d
                        << " shards: rank 0's piece is " << p.size(0) << " elements at " << p.offset(0) << ", it owns "
                        << owned[0] << "; the pieces total " << p.count());
          REQUIRE(same);
        }
    }
}

namespace {

// Stage `zero` against DDP in one bucket after 5 steps: with the ring on both sides (one
// micro-batch: bitwise; two: bitwise for stage 1, which adds micro-batches locally as DDP
// does), with the backend's collectives, and with the gradient norm clipped (each rank sums
// the squares of its own shard only: the group must add them).
void check_equals_ddp(int zero) {
  Communicator& world = test_world();
  for (int m : {1, 2}) {
    const RunSpec spec{zero, DdpOptions::Algorithm::kRing, m, 0};
    INFO(where(world) << ", " << describe(spec) << " vs DDP in one bucket, ring");
    const std::vector<float> want = params_after(world, {0, DdpOptions::Algorithm::kRing, m, 0});
    const std::vector<float> got = params_after(world, spec);
    if (m == 1 || zero == 1)
      CHECK_MATCH(compare_bitwise("parameters after 5 steps", got.data(), want.data(), want.size()));
    else
      check_close_per_tensor(got, want);
  }
  for (const RunSpec& base :
       {RunSpec{0, DdpOptions::Algorithm::kBuiltin, 1, 0}, RunSpec{0, DdpOptions::Algorithm::kRing, 1, 0.05}}) {
    RunSpec spec = base;
    spec.zero = zero;
    INFO(where(world) << ", " << describe(spec) << " vs " << describe(base));
    check_close_per_tensor(params_after(world, spec), params_after(world, base));
  }
  if (zero != 3) return;
  // Stage 02 under ZeRO-3: a recompute gathers its block again (and prefetches nothing). A
  // recompute gives the forward's values bitwise, so the result is DDP's without checkpointing.
  const RunSpec ddp{0, DdpOptions::Algorithm::kRing, 1, 0};
  const std::vector<float> want = params_after(world, ddp);
  for (const char* policy : {"every:2", "selective"}) {
    RunSpec spec{3, DdpOptions::Algorithm::kRing, 1, 0};
    spec.checkpointing = CheckpointPolicy::parse(policy);
    INFO(where(world) << ", " << describe(spec) << " vs " << describe(ddp));
    const std::vector<float> got = params_after(world, spec);
    CHECK_MATCH(compare_bitwise("parameters after 5 steps", got.data(), want.data(), want.size()));
  }
}

}  // namespace

TEST_CASE("ZeRO-1 equals DDP after 5 steps: bitwise with the ring", "[graded][zero1_equal]") { check_equals_ddp(1); }
TEST_CASE("ZeRO-2 equals DDP after 5 steps: bitwise with the ring", "[graded][zero2_equal]") { check_equals_ddp(2); }
TEST_CASE("ZeRO-3 equals DDP after 5 steps: bitwise with the ring", "[graded][zero3_equal]") { check_equals_ddp(3); }

namespace {

// One step of stage `zero` (backend's collectives) with the tracker's peaks reset first.
struct MeasuredStep {
  ZeroHarness h;
  MeasuredStep(Communicator& world, int zero, CheckpointPolicy checkpointing = {})
      : h(world, {zero, DdpOptions::Algorithm::kBuiltin, 1, 0, false, checkpointing}) {
    h.tracker.reset_peaks();
    h.step(random_batch(kShape.V, h.options.batch, kShape.T, 7));
  }
};

// Between steps the tracker holds the sharded state exactly (16 psi bytes -> 8 + 8/d, 4 + 12/d,
// 16/d per parameter), and the activations are DDP's: the same rows through the same model.
void check_state_bytes(Communicator& world, int zero, MeasuredStep& got, MeasuredStep& ddp) {
  const std::size_t psi = ParamLayout(config()).num_params();
  const ZeroShards& s = got.h.zero().shards();
  const ZeroStateBytes want = zero_state_bytes(zero, psi, s.size());
  INFO(where(world) << ", ZeRO-" << zero << ", shard " << s.size() << " of " << psi);
  CHECK(got.h.tracker.current(MemCategory::kParams) == want.params);
  CHECK(got.h.tracker.current(MemCategory::kGrads) == want.grads);
  CHECK(got.h.tracker.current(MemCategory::kOptimizer) == want.optimizer);
  CHECK(want.total() == (zero == 1 ? 8 * psi + 8 * s.size() : zero == 2 ? 4 * psi + 12 * s.size() : 16 * s.size()));
  CHECK(got.h.tracker.peak(MemCategory::kActivations) == ddp.h.tracker.peak(MemCategory::kActivations));
}

}  // namespace

TEST_CASE("per-rank model state of ZeRO-1 and -2 equals the formulas", "[graded][zero_memory]") {
  Communicator& world = test_world();
  MeasuredStep ddp(world, 0);
  for (int zero : {1, 2}) {
    MeasuredStep got(world, zero);
    check_state_bytes(world, zero, got, ddp);
    // Stage 2 keeps the embeddings' gradients through backward and two blocks' (the one
    // computing, the one whose reduce-scatter is in flight).
    const ZeroShards& s = got.h.zero().shards();
    if (zero == 2)
      CHECK(got.h.tracker.peak(MemCategory::kGrads) ==
            sizeof(float) * (s.size() + s.embeddings().size() + 2 * s.largest_block()));
  }
}

TEST_CASE("ZeRO-3's state equals the formula and its peak the one-block working set", "[graded][zero3_memory]") {
  Communicator& world = test_world();
  MeasuredStep ddp(world, 0), got(world, 3);
  check_state_bytes(world, 3, got, ddp);
  // During the step: the embeddings and ln_f gathered for the whole forward (and again for
  // backward), and two blocks, the one computing and the next one prefetched; every other
  // block freed. One block more means a block was not freed; one fewer, no prefetch.
  const ZeroShards& s = got.h.zero().shards();
  const std::size_t root = s.embeddings().size() + s.head().size(), block = s.largest_block();
  const std::size_t want = sizeof(float) * (s.size() + root + 2 * block),
                    peak = got.h.tracker.peak(MemCategory::kParams);
  INFO(where(world) << ": peak parameter bytes " << peak << ", want " << want << " (shard " << s.size()
                    << " + embeddings and ln_f " << root << " + 2 blocks of " << block << " floats); off by "
                    << (static_cast<double>(peak) - static_cast<double>(want)) / (sizeof(float) * block) << " blocks");
  CHECK(peak == want);
  CHECK(got.h.tracker.peak(MemCategory::kGrads) == sizeof(float) * (s.size() + s.embeddings().size() + 2 * block));
  // Checkpointing re-runs block l's forward (every:1) or its attention (selective) just before
  // l's backward, with l already gathered by the backward's prefetch: the recompute must use it
  // and prefetch nothing itself (the next block to run is l's backward, then l-1). So the peak
  // stays two blocks, and not one byte more is sent than without checkpointing.
  for (const char* policy : {"every:1", "selective"}) {
    MeasuredStep again(world, 3, CheckpointPolicy::parse(policy));
    const std::size_t sent = got.h.strategy->step_report().bytes_sent,
                      sent_again = again.h.strategy->step_report().bytes_sent;
    INFO("with checkpointing " << policy << ": sent " << sent_again << " bytes, " << sent << " without");
    CHECK(sent_again == sent);
    const std::size_t peak_again = again.h.tracker.peak(MemCategory::kParams);
    INFO("with checkpointing " << policy << ": peak parameter bytes " << peak_again << ", want " << want << "; off by "
                               << (static_cast<double>(peak_again) - static_cast<double>(want)) /
                                      (sizeof(float) * block)
                               << " blocks");
    CHECK(peak_again == want);
  }
}

TEST_CASE("bytes each rank sends per step equal the ring's formula: 2 psi (d-1)/d, 3 psi (d-1)/d for stage 3",
          "[graded][zero_traffic]") {
  Communicator& world = test_world();
  const int d = world.size(), r = world.rank();
  const std::size_t psi = ParamLayout(config()).num_params();
  const BlockPartition p{psi, d};
  // Ring reduce-scatter: every piece but one's own; all-gather: every piece but the next rank's.
  const std::size_t rs = d > 1 ? psi - p.size(r) : 0, ag = d > 1 ? psi - p.size((r + 1) % d) : 0;
  for (auto algorithm : {DdpOptions::Algorithm::kBuiltin, DdpOptions::Algorithm::kRing})
    for (int m : {1, 2})
      for (int zero : {1, 2, 3}) {
        const RunSpec spec{zero, algorithm, m, 0};
        ZeroHarness h(world, spec);
        const CommStats before = h.zero().step_communicator().stats();
        h.step(random_batch(kShape.V, h.options.batch, kShape.T, 3));
        const std::size_t want = zero == 1 ? rs + ag : zero == 2 ? m * rs + ag : m * (rs + 2 * ag);
        const std::size_t sent = h.strategy->step_report().bytes_sent;
        INFO(where(world) << ", " << describe(spec) << ": sent " << sent << " bytes, want " << want
                          << " elements = " << want * sizeof(float) << " bytes");
        CHECK(sent == want * sizeof(float));
        // Every gather and reduce-scatter goes through the algorithm asked for: the other's rows
        // (the backend's collectives, or our ring's) count no call in the step.
        const CommStats& after = h.zero().step_communicator().stats();
        const bool ring = algorithm == DdpOptions::Algorithm::kRing;
        for (CommOp op : ring ? std::vector{CommOp::kAllGather, CommOp::kReduceScatter}
                              : std::vector{CommOp::kRingAllGather, CommOp::kRingReduceScatter}) {
          INFO(comm_op_name(op) << " calls in the step of a " << (ring ? "ring" : "builtin") << " run");
          CHECK(after[op].calls - before[op].calls == 0);
        }
      }
}

TEST_CASE("stage 3 prefetches: a block's gather starts before the previous block's compute ends",
          "[graded][zero_overlap]") {
  Communicator& world = test_world();
  ZeroHarness h(world, {3, DdpOptions::Algorithm::kBuiltin, 1, 0});
  h.step(random_batch(kShape.V, h.options.batch, kShape.T, 5));
  // Every block but the first is gathered in forward while an earlier block computes, and in
  // backward likewise: its gather interval contains the start of a compute interval.
  const std::size_t prefetched = prefetched_gathers(h.zero().timeline().events());
  INFO(where(world) << ": " << prefetched << " block gathers overlapped a later compute interval, want at least "
                    << 2 * (kShape.L - 1));
  CHECK(prefetched >= static_cast<std::size_t>(2 * (kShape.L - 1)));
}

TEST_CASE(
    "ZeRO-Offload: the same parameters as without it; the device keeps 4 or 8 bytes per parameter, the "
    "host 16/d",
    "[graded][zero_offload]") {
  Communicator& world = test_world();
  const std::size_t psi = ParamLayout(config()).num_params();
  for (int zero : {1, 2})
    for (auto algorithm : {DdpOptions::Algorithm::kRing, DdpOptions::Algorithm::kBuiltin})
      for (int m : {1, 2}) {
        // AdamW on the host copy is the same arithmetic on the same values: bitwise equal, with
        // clipping too (the norm is computed from the host gradient shard).
        const RunSpec on{zero, algorithm, m, 0.05, true};
        RunSpec off = on;
        off.offload = false;
        INFO(where(world) << ", " << describe(on) << " vs without offload");
        const std::vector<float> want = params_after(world, off), got = params_after(world, on);
        CHECK_MATCH(compare_bitwise("parameters after 5 steps", got.data(), want.data(), want.size()));
      }
  for (int zero : {1, 2}) {
    ZeroHarness h(world, {zero, DdpOptions::Algorithm::kBuiltin, 2, 0, true});
    h.step(random_batch(kShape.V, h.options.batch, kShape.T, 9));
    const ZeroShards& s = h.zero().shards();
    const MemoryTracker& host = h.zero().host_memory();
    const ZeroStateBytes device = zero_offload_device_bytes(zero, psi), offloaded = zero_offload_host_bytes(s.size());
    INFO(where(world) << ", ZeRO-" << zero << "-Offload, shard " << s.size() << " of " << psi << ": device "
                      << h.tracker.current(MemCategory::kParams) << "/" << h.tracker.current(MemCategory::kGrads) << "/"
                      << h.tracker.current(MemCategory::kOptimizer) << " bytes, host "
                      << host.current(MemCategory::kParams) << "/" << host.current(MemCategory::kGrads) << "/"
                      << host.current(MemCategory::kOptimizer));
    // The device: the parameters (and stage 1's whole gradient), no optimizer state.
    CHECK(h.tracker.current(MemCategory::kParams) == device.params);
    CHECK(h.tracker.current(MemCategory::kGrads) == device.grads);
    CHECK(h.tracker.current(MemCategory::kOptimizer) == 0);
    CHECK(device.total() == (zero == 1 ? 8 : 4) * psi);
    // The host: master, gradient shard, m and v of this rank's shard, 16 psi/d.
    CHECK(host.current(MemCategory::kParams) == offloaded.params);
    CHECK(host.current(MemCategory::kGrads) == offloaded.grads);
    CHECK(host.current(MemCategory::kOptimizer) == offloaded.optimizer);
    CHECK(offloaded.total() == 16 * s.size());
  }
}

TEST_CASE("ZeRO checkpoints: each rank its shard; resume bitwise; reshard onto another d", "[zero_resume]") {
  Communicator& world = test_world();
  if (world.size() < 2) return;
  TrainOptions o;
  o.config = "tiny";
  o.batch = 4 * world.size();
  o.steps = 4;
  o.seed = kSeed;
  o.data = tiny_token_shard(world, "scalelab_zero_resume.bin");
  o.parallel.zero = 3;
  const std::string state = per_world_temp_path(world, "scalelab_zero_resume.state");
  MemoryTracker t1, t2, t3;
  Trainer straight(o, &t1, {}, make_strategy_factory(&world));
  for (int i = 0; i < 4; ++i) straight.step();
  Trainer first(o, &t2, {}, make_strategy_factory(&world));
  for (int i = 0; i < 2; ++i) first.step();
  first.save_checkpoint(state);
  CHECK(std::filesystem::exists(zero_shard_path(state, world.rank())));
  TrainOptions again = o;
  again.resume = state;
  again.parallel.zero = 1;  // the shards are the same for every stage
  Trainer second(again, &t3, {}, make_strategy_factory(&world));
  for (int i = 0; i < 2; ++i) second.step();
  INFO(where(world));
  CHECK_MATCH(compare_bitwise("this rank's shard, resumed vs straight", second.model().master_params(),
                              straight.model().master_params(), straight.model().num_params()));

  // Onto 2 ranks of the world: refused without --reshard, re-cut with it. The whole state the
  // 2 ranks then hold equals the whole state the d ranks saved.
  const TrainCheckpoint saved = first.checkpoint();  // this rank's shard at step 2
  const std::size_t n = ParamLayout(first.model().config()).num_params();
  std::vector<std::vector<float>> whole_then;
  for (const std::vector<float>* v : {&saved.params, &saved.adam_m, &saved.adam_v}) {
    whole_then.emplace_back(n);
    world.all_gather(v->data(), whole_then.back().data(), n, DataType::kFloat32);
  }
  auto sub = world.split(world.rank() < 2 ? 0 : 1, world.rank());
  if (world.rank() < 2 && world.size() > 2) {
    TrainOptions two = again;
    two.batch = 8;
    MemoryTracker t4, t5;
    CHECK_THROWS_WITH(Trainer(two, &t4, {}, make_strategy_factory(sub.get())),
                      Catch::Contains("was saved by ZeRO over " + std::to_string(world.size()) +
                                      " data-parallel ranks, and this run has 2") &&
                          Catch::Contains("add --reshard"));
    two.parallel.reshard = true;
    Trainer resharded(two, &t5, {}, make_strategy_factory(sub.get()));
    const TrainCheckpoint mine = resharded.checkpoint();
    CHECK(mine.step == 2);
    int k = 0;
    for (const std::vector<float>* v : {&mine.params, &mine.adam_m, &mine.adam_v}) {
      std::vector<float> whole_now(n);
      sub->all_gather(v->data(), whole_now.data(), n, DataType::kFloat32);
      CHECK_MATCH(compare_bitwise(std::string("resharded onto 2 ranks vs saved by ") + std::to_string(world.size()) +
                                      (k == 0   ? ": params"
                                       : k == 1 ? ": adam.m"
                                                : ": adam.v"),
                                  whole_now.data(), whole_then[static_cast<std::size_t>(k)].data(), n));
      ++k;
    }
  }
  world.barrier();
}

TEST_CASE("bad ZeRO settings and files fail with one clear message", "[zero_errors]") {
  Communicator& world = test_world();
  INFO(where(world));
  TrainOptions o;
  o.parallel.zero = 4;
  CHECK_THROWS_WITH(check_parallel_options(o, world.size()), Catch::Contains("must be 0, 1, 2 or 3"));
  o.parallel.zero = 0;
  o.parallel.offload = true;
  CHECK_THROWS_WITH(check_parallel_options(o, world.size()), Catch::Contains("add --zero 1"));
  o.parallel.zero = 3;
  CHECK_THROWS_WITH(ZeroStrategy(world, o), Catch::Contains("offload: --offload with --zero 3") &&
                                                Catch::Contains("use --zero 1 or --zero 2 with --offload"));
  // Mixed precision: every stage (tests/dist/test_zero_mixed.cpp); offload and the fp32 ring are
  // refused by name.
  o.precision = "bf16";
  o.parallel.zero = 2;
  CHECK_THROWS_WITH(ZeroStrategy(world, o),
                    "offload: --offload with --precision bf16: the CPU's offloaded optimizer is "
                    "built in fp32 only; use --precision fp32 with --offload, or leave out "
                    "--offload (on a GPU, --device cuda offloads any precision)");
  o.parallel.offload = false;
  o.precision = "fp16";
  o.parallel.allreduce = "ring";
  CHECK_THROWS_WITH(ZeroStrategy(world, o),
                    "allreduce: --zero 2 with --precision fp16: the ring (comm/ring.hpp) adds "
                    "fp32 gradients, and this model keeps them in half; use --allreduce "
                    "builtin with --precision fp16");
  o.parallel.allreduce = "builtin";
  o.device = "cuda";
  CHECK_THROWS_WITH(ZeroStrategy(world, o), Catch::Contains("device: --zero 2: ZeRO's shards run on the CPU"));
  o.device = "cpu";
  o.precision = "fp32";
  o.parallel.reshard = true;
  o.parallel.zero = 0;
  CHECK_THROWS_WITH(check_parallel_options(o, world.size()), Catch::Contains("--reshard re-cuts"));
  if (world.size() % 2 == 0) {
    o.parallel.reshard = false;
    // ZeRO-1 composes with tp (the distributed optimizer); -2 and -3 there are not built yet, and
    // offload and reshard are refused with a reason.
    o.parallel.zero = 1;
    o.parallel.tp = 2;
    CHECK_NOTHROW(check_parallel_options(o, world.size()));
    o.parallel.zero = 3;
    CHECK_THROWS_WITH(check_parallel_options(o, world.size()),
                      Catch::Contains("zero: --zero 3 with --tp 2: ZeRO-2 and -3 inside tensor parallelism") &&
                          Catch::Contains("use --zero 1 with --tp"));
    o.parallel.zero = 1;
    o.parallel.offload = true;
    CHECK_THROWS_WITH(check_parallel_options(o, world.size()),
                      Catch::Contains("offload: --offload with --tp 2") && Catch::Contains("drop --offload"));
    o.parallel.offload = false;
    o.parallel.reshard = true;
    CHECK_THROWS_WITH(check_parallel_options(o, world.size()),
                      Catch::Contains("reshard: --reshard with --tp 2") && Catch::Contains("without --reshard"));
    o.parallel.reshard = false;
    // ZeRO-2 and -3 with a pipeline: refused by design, and the message says why.
    o.parallel.tp = 1;
    o.parallel.pp = 2;
    o.parallel.zero = 2;
    o.grad_accum = 2;
    CHECK_THROWS_WITH(check_parallel_options(o, world.size()), Catch::Contains("zero: --zero 2 with --pp 2") &&
                                                                   Catch::Contains("DeepSpeed refuses") &&
                                                                   Catch::Contains("use --zero 1 with a pipeline") &&
                                                                   Catch::Contains("drop --pp to use ZeRO-2"));
    o.grad_accum = 1;
  }
  // A shard file read as a whole checkpoint says how to resume it.
  const std::string path = per_world_temp_path(world, "scalelab_zero_shard_" + std::to_string(world.rank()) + ".state");
  TrainCheckpoint c;
  c.config = config();
  const std::size_t n = ParamLayout(c.config).num_params();
  c.params.assign(n / 2, 1.0f);
  c.adam_m = c.adam_v = c.params;
  save_checkpoint_shard(path, c, CheckpointShard{1, 2, n / 2, n / 2 + n / 2});
  CHECK_THROWS_WITH(load_checkpoint(path, &c.config),
                    Catch::Contains("holds rank 1's shard of a ZeRO checkpoint sharded over 2 ranks") &&
                        Catch::Contains("mpirun -np 2"));
  CheckpointShard cut;
  CHECK(load_checkpoint(path, &c.config, &cut).params.size() == n / 2);
  CHECK(cut.begin == n / 2);
}
