// The planner against this kit's own runs (issue: "validated against our own measured runs"):
// every layout the stages can run on the ranks of this job is run for one step of the tiny
// model through the trainer's seam (parallel/strategy_factory.hpp, as `scalelab train` builds
// it), and what its memory tracker and communicator counted must equal what the planner
// predicts for that layout: parameter, gradient and optimizer bytes exactly, the activation
// peak exactly, and the bytes each rank sent in the step's collectives and messages exactly
// (ParallelStrategy::step_report: data-parallel reductions, tensor-parallel collectives,
// pipeline messages).
#include <catch2/catch.hpp>

#include <sstream>

#include "batch.hpp"
#include "parallel/strategy_factory.hpp"
#include "plan/plan_memory.hpp"
#include "plan/plan_traffic.hpp"
#include "strategy_harness.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {

constexpr std::uint64_t kSeed = 7;

struct Run {
  int tp = 1, pp = 1, zero = 0, micro_batches = 1;
  bool sp = false;
  std::string schedule = "1f1b", checkpoint = "none", attention = "naive", precision = "fp32";
  std::string describe() const {
    std::ostringstream s;
    s << "tp " << tp << " pp " << pp << " zero " << zero << " m " << micro_batches << (sp ? " sp" : "") << " "
      << schedule << " ckpt " << checkpoint << " attention " << attention << " " << precision;
    return s.str();
  }
};

struct Measured {
  std::size_t params, grads, optimizer, activations;
  std::uint64_t bytes_sent;
};

Measured run_one(Communicator& world, const Run& r, int rows_per_micro) {
  StrategyHarness h;
  const GPTConfig c = gpt_config_by_name("tiny");
  const int dp = world.size() / (r.tp * r.pp);
  h.options.config = "tiny";
  h.options.seq_len = c.max_seq_len;
  h.options.batch = dp * r.micro_batches * rows_per_micro;
  h.options.grad_accum = r.micro_batches;
  h.options.checkpoint = CheckpointPolicy::parse(r.checkpoint);
  h.options.parallel.tp = r.tp;
  h.options.parallel.pp = r.pp;
  h.options.parallel.zero = r.zero;
  h.options.parallel.schedule = r.schedule;
  h.options.parallel.sequence_parallel = r.sp;
  h.options.attention = r.attention;
  h.options.precision = r.precision;
  h.options.parallel.bucket_mb = h.options.parallel.first_bucket_mb = 1024;  // one bucket: one ring all-reduce
  std::unique_ptr<ParallelStrategy> strategy = make_strategy_factory(&world)(h.options);
  h.start(*strategy, c, kSeed, CheckpointPolicy::parse(r.checkpoint), "plan test");
  const Batch b = random_batch(c.vocab_size, h.options.batch, c.max_seq_len, 3);
  h.forward_backward(b.tokens, b.targets);
  h.update();
  return {h.tracker.current(MemCategory::kParams), h.tracker.current(MemCategory::kGrads),
          h.tracker.current(MemCategory::kOptimizer), h.tracker.peak(MemCategory::kActivations),
          strategy->step_report().bytes_sent};
}

void check_against_plan(Communicator& world, const Run& r) {
  const GPTConfig c = gpt_config_by_name("tiny");
  const int rows = 2;
  PlanLayout l;
  l.tp = r.tp;
  l.pp = r.pp;
  l.dp = world.size() / (r.tp * r.pp);
  l.zero = r.zero;
  l.micro_batches = r.micro_batches;
  l.micro_rows = rows;
  l.sequence_parallel = r.sp;
  l.schedule = r.schedule;
  l.checkpoint = CheckpointPolicy::parse(r.checkpoint);
  l.precision = r.precision;
  l.attention = parse_attention_kind(r.attention);
  const int stage = world.rank() / (l.dp * l.tp) % l.pp;  // pipeline rank, as the grid numbers them
  const PlanMemory want = plan_memory(c, l, stage);
  const PlanTraffic traffic = plan_traffic(c, l, cluster_preset("h100-sxm"), stage);
  const Measured got = run_one(world, r, rows);
  INFO(where(world) << ", " << r.describe() << " (planner layout " << l.describe() << ", pipeline rank " << stage
                    << "): measured params/grads/optimizer/activations " << got.params << "/" << got.grads << "/"
                    << got.optimizer << "/" << got.activations << " bytes, planner " << want.params << "/" << want.grads
                    << "/" << want.optimizer << "/" << want.activations << "; sent " << got.bytes_sent
                    << " bytes, planner dp " << traffic.dp_bytes << " tp " << traffic.tp_bytes << " pp "
                    << traffic.pp_bytes);
  CHECK(static_cast<double>(got.params) == want.params);
  CHECK(static_cast<double>(got.grads) == want.grads);
  CHECK(static_cast<double>(got.optimizer) == want.optimizer);
  CHECK(static_cast<double>(got.activations) == want.activations);
  CHECK(static_cast<double>(got.bytes_sent) == traffic.total());
}

}  // namespace

TEST_CASE("data parallel and ZeRO 1-3: memory and traffic per rank as the planner predicts", "[plan_runs]") {
  Communicator& world = test_world();
  for (int zero = 0; zero <= 3; ++zero)
    for (int m : {1, 2}) check_against_plan(world, {1, 1, zero, m});
  check_against_plan(world, {1, 1, 2, 1, false, "1f1b", "sqrt"});
}

TEST_CASE("data parallel and ZeRO 1-3 in bf16: memory and traffic per rank as the planner predicts", "[plan_runs]") {
  // 2 + 2 + 12 bytes per parameter, ZeRO-1 4 + 12/d, ZeRO-2 2 + 14/d, ZeRO-3 16/d; the gradients
  // and the gathered parameters travel in bf16, half of fp32's bytes.
  Communicator& world = test_world();
  for (int zero = 0; zero <= 3; ++zero)
    for (int m : {1, 2}) {
      Run r{1, 1, zero, m};
      r.precision = "bf16";
      check_against_plan(world, r);
    }
}

TEST_CASE("tensor parallel over every rank: memory per rank as the planner predicts", "[plan_runs]") {
  Communicator& world = test_world();
  if (4 % world.size() != 0) return;  // the tiny model's 4 heads must split
  for (bool sp : {false, true}) {
    check_against_plan(world, {world.size(), 1, 0, 1, sp});
    check_against_plan(world, {world.size(), 1, 0, 1, sp, "1f1b", "none", "chunked"});
  }
}

TEST_CASE("tensor parallel in bf16, alone and with dp and ZeRO-1: memory and traffic as the planner predicts",
          "[plan_runs]") {
  // Stage 03 inside stage 06: 2 + 2 + 12 bytes per parameter of the shard, half activations, the
  // f and g collectives in half (the cross-entropy's statistics in fp32).
  Communicator& world = test_world();
  auto bf16 = [](Run r) {
    r.precision = "bf16";
    return r;
  };
  if (4 % world.size() == 0)
    for (bool sp : {false, true}) {
      check_against_plan(world, bf16({world.size(), 1, 0, 2, sp}));
      check_against_plan(world, bf16({world.size(), 1, 0, 1, sp, "1f1b", "sqrt", "flash"}));
    }
  if (world.size() == 4)
    for (int zero : {0, 1}) check_against_plan(world, bf16({2, 1, zero, 2, true}));
  if (world.size() == 8) check_against_plan(world, bf16({2, 2, 1, 2, true, "1f1b", "sqrt"}));  // dp x tp x pp
}

TEST_CASE("a pipeline over every rank: memory per pipeline rank as the planner predicts", "[plan_runs]") {
  Communicator& world = test_world();
  if (world.size() > 2) return;  // the tiny model has 2 layers
  for (const char* schedule : {"afab", "1f1b", "zb-h1"})
    check_against_plan(world, {1, world.size(), 0, 4, false, schedule});
}

TEST_CASE("a pipeline in bf16, and dp x pp in bf16 with and without ZeRO-1: memory and traffic as the planner predicts",
          "[plan_runs]") {
  // Stage 03 inside stage 05: 2 + 2 + 12 bytes per parameter of the stage, half activations, and
  // the messages, the tied embedding's sum and the replicas' all-reduce in half.
  Communicator& world = test_world();
  if (world.size() == 2)
    for (const std::string schedule : {"afab", "1f1b", "zb-h1"}) {
      Run r{1, 2, 0, 4, false, schedule};
      r.precision = "bf16";
      check_against_plan(world, r);       // zb-h1: its weight-gradient tape in half too
      if (schedule == "zb-h1") continue;  // the split backward runs without checkpointing
      r.checkpoint = "every";
      check_against_plan(world, r);
    }
  if (world.size() == 4)
    for (int zero : {0, 1}) {  // dp x pp, and with the distributed optimizer (2 + 2 + 12/d)
      Run r{1, 2, zero, 2, false, "1f1b", "sqrt"};
      r.precision = "bf16";
      check_against_plan(world, r);
    }
}

TEST_CASE("composed layouts, tp x pp, and dp x pp and dp x tp with and without ZeRO-1: as the planner predicts",
          "[plan_runs]") {
  Communicator& world = test_world();
  if (world.size() != 4) return;  // 2 model ranks x 2 replicas, or 2 x 2 model ranks
  check_against_plan(world, {2, 2, 0, 2});
  check_against_plan(world, {2, 2, 0, 4, true, "1f1b", "sqrt"});
  check_against_plan(world, {2, 2, 0, 2, true, "afab"});
  check_against_plan(world, {2, 2, 0, 2, true, "1f1b", "sqrt", "flash"});  // stage 08 inside tp x pp
  check_against_plan(world, {2, 2, 0, 4, true, "zb-h1"});                  // the tape: 2 N C + 7 N C/t per block
  Run zb{2, 2, 0, 4, false, "zb-h1"};
  zb.precision = "bf16";
  check_against_plan(world, zb);
  for (int zero : {0, 1}) {
    check_against_plan(world, {2, 1, zero, 1});
    check_against_plan(world, {2, 1, zero, 2, true});
    check_against_plan(world, {1, 2, zero, 4, false, "1f1b"});
    check_against_plan(world, {1, 2, zero, 2, false, "afab", "sqrt"});
  }
}

TEST_CASE("dp x tp x pp with ZeRO-1, sequence parallelism and checkpointing: as the planner predicts", "[plan_runs]") {
  Communicator& world = test_world();
  if (world.size() != 8) return;  // 2 x 2 x 2
  check_against_plan(world, {2, 2, 1, 2, true, "1f1b", "sqrt"});
  check_against_plan(world, {2, 2, 0, 4, false, "afab"});
}
