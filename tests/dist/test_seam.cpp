// The parallel-strategy seam (train/parallel_strategy.hpp) carries a strategy the library does
// not know: a data-parallel strategy written here, in the test, that runs each rank's rows and
// then all-reduces the whole gradient buffer in one call after a deliberate delay. Run through
// the unchanged Trainer on 1 and 3 ranks, it must train like stage 01 with d micro-batches
// (the prior stage on one process) and be called at the seam's points in the documented order.
// Why not bitwise on several ranks: the all-reduce sums the ranks' gradients in MPI's order,
// while stage 01 adds micro-batch after micro-batch into one buffer. Tolerance: 1e-5 relative
// to the largest parameter, after 3 AdamW steps. On one rank the arithmetic is the same:
// bitwise.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "compare.hpp"
#include "ddp_fixtures.hpp"
#include "dist/zero_strategy.hpp"
#include "parallel/strategy_factory.hpp"
#include "train/accumulate.hpp"
#include "train/trainer.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {

constexpr int kB = 12;  // rows per step: splits over 1, 2, 3 and 4 ranks

// A test double: data parallelism the slow, simple way, and a log of the seam's calls.
class DelayedAllReduce final : public ParallelStrategy {
 public:
  explicit DelayedAllReduce(Communicator& comm) : comm_(comm) {}
  std::string describe() const override { return "test double: one delayed all-reduce"; }
  int data_parallel_size() const override { return comm_.size(); }
  std::unique_ptr<TrainModel> make_model(const GPTConfig& config, const std::string& precision, MemoryTracker* tracker,
                                         const TrainModelFactory& whole) override {
    calls.push_back("make_model");
    return whole(config, precision, tracker);
  }
  void attach(const StrategyContext& ctx) override {
    calls.push_back("attach");
    model_ = &ctx.model;
  }
  void begin_step(const GlobalBatch&) override { calls.push_back("begin_step"); }
  double run_micro_batches(TrainModel& model, const GlobalBatch& batch, double loss_scale) override {
    calls.push_back("run_micro_batches");
    const int d = comm_.size(), rows = batch.rows / d;
    const std::size_t offset = static_cast<std::size_t>(comm_.rank()) * rows * batch.T;
    return accumulate_gradients(model, batch.inputs + offset, batch.targets + offset, rows, batch.T,
                                batch.micro_batches, loss_scale / d);
  }
  void sync_gradients(TrainModel& model) override {
    calls.push_back("sync_gradients");
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * (comm_.rank() + 1)));  // ranks arrive apart
    comm_.all_reduce(model.fp32_grads(), model.num_params());
  }
  double mean_loss(double loss) override {
    calls.push_back("mean_loss");
    comm_.all_reduce(&loss, 1);
    return loss / comm_.size();
  }
  TrainModel::StepOutcome optimizer_step(TrainModel& model, AdamW& opt, double lr, double grad_scale,
                                         double clip) override {
    calls.push_back("optimizer_step");
    return model.optimizer_step(opt, lr, grad_scale, clip);
  }
  StepCommReport step_report() const override {
    StepCommReport r;
    r.bytes_sent = 42;  // a marker: the trainer must pass the strategy's report through
    return r;
  }
  void save_state(TrainCheckpoint&) const override { ++saves; }
  void load_state(const TrainCheckpoint&) override { ++loads; }

  std::vector<std::string> calls;
  mutable int saves = 0;
  int loads = 0;

 private:
  Communicator& comm_;
  TrainModel* model_ = nullptr;
};

TrainOptions seam_options(const std::string& data) {
  TrainOptions o;
  o.config = "tiny";
  o.batch = kB;
  o.data = data;
  o.seed = 11;
  o.adamw.lr = 3e-3;
  o.steps = 3;
  return o;
}

}  // namespace

TEST_CASE("a strategy written outside the library trains through the seam like stage 01", "[seam]") {
  Communicator& world = test_world();
  const int d = world.size();
  if (kB % d != 0) {
    SUCCEED("12 rows do not split over " << d << " ranks");
    return;
  }
  const std::string data = tiny_token_shard(world, "scalelab_seam_tiny.bin");
  INFO(where(world));

  // The prior stage: one process, the whole batch in d micro-batches.
  MemoryTracker t1;
  TrainOptions single = seam_options(data);
  single.grad_accum = d;
  Trainer want(single, &t1);
  CHECK(want.strategy().describe() == "single device");

  MemoryTracker t2;
  DelayedAllReduce* dbl = nullptr;
  Trainer got(seam_options(data), &t2, {}, [&](const TrainOptions&) {
    auto s = std::make_unique<DelayedAllReduce>(world);
    dbl = s.get();
    return s;
  });
  REQUIRE(dbl != nullptr);
  for (int step = 0; step < 3; ++step) {
    const double a = want.step().loss;
    const StepStats s = got.step();
    INFO("step " << step << ": loss " << s.loss << " vs stage 01 " << a);
    CHECK(std::fabs(s.loss - a) <= 1e-5 * std::fabs(a));
    CHECK(s.comm_bytes_sent == 42);
  }
  const std::size_t n = want.model().num_params();
  const float* p = want.model().master_params();
  const double scale = std::fabs(
      *std::max_element(p, p + n, [](float x, float y) { return std::fabs(x) < std::fabs(y); }));
  if (d == 1) {
    CHECK_MATCH(compare_bitwise("params after 3 steps vs stage 01", got.model().master_params(), p, n));
  } else {
    CHECK_MATCH(compare_close("params after 3 steps vs stage 01", got.model().master_params(), p, n, 0, 1e-5 * scale));
  }

  // The seam's points, in order: the model and attach once, then per step the five hooks.
  std::vector<std::string> expected = {"make_model", "attach"};
  for (int step = 0; step < 3; ++step)
    for (const char* c : {"begin_step", "run_micro_batches", "sync_gradients", "mean_loss", "optimizer_step"})
      expected.push_back(c);
  CHECK(dbl->calls == expected);

  // Validation divides the rows by the strategy's data-parallel size, and is the same number.
  CHECK(std::fabs(got.validation_loss() - want.validation_loss()) <= 1e-5 * std::fabs(want.validation_loss()));

  // The strategy's part of a training checkpoint: written with it, read back on restore.
  const TrainCheckpoint c = got.checkpoint();
  CHECK(dbl->saves == 1);
  got.restore(c);
  CHECK(dbl->loads == 1);
}

TEST_CASE("the library's factory picks single device or DDP from the options, and refuses what is not built",
          "[seam]") {
  Communicator& world = test_world();
  const std::string data = tiny_token_shard(world, "scalelab_seam_factory.bin");
  INFO(where(world));
  const StrategyFactory factory = make_strategy_factory(&world);
  {
    MemoryTracker t;
    TrainOptions o = seam_options(data);
    o.parallel.ddp = "naive";  // DDP even on one rank, when asked for by name
    Trainer trainer(o, &t, {}, factory);
    REQUIRE(dynamic_cast<DdpStrategy*>(&trainer.strategy()) != nullptr);
    CHECK(trainer.strategy().data_parallel_size() == world.size());
    CHECK(trainer.strategy().describe().find("naive") != std::string::npos);
  }
  if (world.size() == 1) {
    MemoryTracker t;
    Trainer trainer(seam_options(data), &t, {}, factory);
    CHECK(trainer.strategy().describe() == "single device");
  }
  MemoryTracker t;
  TrainOptions o = seam_options(data);
  o.parallel.zero = 1;
  {
    Trainer trainer(o, &t, {}, factory);  // stage 07 is one more strategy at the seam
    CHECK(dynamic_cast<ZeroStrategy*>(&trainer.strategy()) != nullptr);
  }
  // A grid that does not match the job fails on every rank, with the same message, before any
  // rank waits for another.
  o = seam_options(data);
  o.parallel.dp = world.size() + 1;
  const std::string want = "dp: --dp " + std::to_string(world.size() + 1) +
                           " x --tp 1 x --pp 1 = " + std::to_string(world.size() + 1) + " ranks, but this job has " +
                           std::to_string(world.size());
  CHECK_THROWS_WITH(check_parallel_options(o, world.size()), Catch::Contains(want));
  CHECK_THROWS_WITH(Trainer(o, &t, {}, factory), Catch::Contains(want));
}
