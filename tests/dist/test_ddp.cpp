// Stage 04b, data parallelism, under mpiexec with 1-4 ranks, against stage 01 from the
// reference: d ranks with B/d rows each must give the gradients of stage 01 with d
// micro-batches of the same batch. Why not bitwise: the sums over ranks run in the all-reduce's
// order (a ring, or MPI's own) and the bias gradients restart from zero on every rank, while
// stage 01 keeps adding rows onto one buffer; float addition is not associative. Tolerance:
// |a - b| <= 1e-5 |b| + 1e-6 max|b|.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "batch.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "ddp_fixtures.hpp"
#include "dist/ddp.hpp"
#include "train/accumulate.hpp"
#include "train/fp32_model.hpp"
#include "train/trainer.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {
const prior::ModelShape kShape{64, 16, 32, 2, 4};
constexpr int kB = 12, kT = 16;  // 12 rows split over 1, 2, 3 or 4 ranks
constexpr std::uint64_t kSeed = 5;

std::string tiny_shard() { return tiny_token_shard(test_world(), "scalelab_ddp_tiny.bin"); }

TrainOptions tiny_options(const std::string& data) { return tiny_ddp_options(data, kB, kSeed); }
}  // namespace

TEST_CASE("DDP on d ranks equals stage 01 with d micro-batches", "[graded][ddp_equal]") {
  Communicator& world = test_world();
  const int d = world.size();
  const Batch batch = random_batch(kShape.V, kB, kT, 77);  // the same on every rank
  const prior::StepResult want = prior::stage01_step(kShape, kSeed, batch.tokens, batch.targets, kB, kT, d);
  double max_ref = 0;
  for (float g : want.grads) max_ref = std::max(max_ref, static_cast<double>(std::fabs(g)));
  using M = DdpOptions::Mode;
  using A = DdpOptions::Algorithm;
  for (auto [mode, algorithm] : {std::pair{M::kNaive, A::kBuiltin}, std::pair{M::kNaive, A::kRing},
                                 std::pair{M::kBucketed, A::kBuiltin}, std::pair{M::kBucketed, A::kRing}}) {
    INFO(where(world) << ", " << (mode == M::kNaive ? "naive" : "bucketed") << ", "
                      << (algorithm == A::kRing ? "ring" : "builtin") << " all-reduce");
    MemoryTracker tracker;
    Fp32TrainModel model(config_from(kShape), &tracker);
    model.init_weights(kSeed);
    model.zero_grad();
    DataParallel ddp(world, model, small_buckets(mode, algorithm));
    const int local = kB / d;
    const std::size_t offset = static_cast<std::size_t>(world.rank()) * local * kT;
    ddp.begin_step(1);
    double loss = accumulate_gradients(model, batch.tokens.data() + offset, batch.targets.data() + offset, local, kT, 1,
                                       1.0 / d);
    ddp.finish_step();
    world.all_reduce(&loss, 1);
    CHECK(loss / d == Approx(want.loss).epsilon(1e-6));
    CHECK_MATCH(compare_close("summed gradients vs stage 01", model.gpt().grads(), want.grads.data(), want.grads.size(),
                              1e-5, 1e-6 * max_ref));
  }
}

TEST_CASE("parameters stay bitwise identical on every rank", "[graded][ddp_identical]") {
  Communicator& world = test_world();
  const std::string data = tiny_shard();
  for (const char* mode : {"naive", "bucketed"}) {
    INFO(where(world) << ", " << mode);
    MemoryTracker tracker;
    TrainOptions o = tiny_options(data);
    o.grad_accum = kB % (2 * world.size()) == 0 ? 2 : 1;
    Trainer trainer(o, &tracker, {},
                    ddp_strategy(world, small_buckets(DdpOptions::parse_mode(mode), DdpOptions::Algorithm::kRing)));
    const ReplicaRun run = train_replica(trainer, world, 5);
    CHECK(run.last_loss < run.first_loss);  // it trains
    CHECK_MATCH(compare_bitwise("params vs rank 0 after 5 steps", run.mine.data(), run.root.data(), run.mine.size()));
  }
}

TEST_CASE("only the last micro-batch communicates, and buckets start during backward", "[graded][ddp_overlap]") {
  Communicator& world = test_world();
  MemoryTracker tracker;
  TrainOptions o = tiny_options(tiny_shard());
  o.batch = 4 * world.size();
  o.grad_accum = 4;
  const DdpOptions opts = small_buckets(DdpOptions::Mode::kBucketed, DdpOptions::Algorithm::kBuiltin);
  Trainer trainer(o, &tracker, {}, ddp_strategy(world, opts));
  const std::size_t buckets = ddp_of(trainer).engine().bucket_ranges().size();
  const auto calls_before = world.stats()[CommOp::kAllReduce].calls;
  trainer.step();
  const auto calls = world.stats()[CommOp::kAllReduce].calls - calls_before;
  INFO(where(world) << ": " << calls << " all-reduce calls in one step of 4 micro-batches, " << buckets
                    << " buckets (+1 for the reported loss)");
  CHECK(calls == buckets + 1);
  // Every bucket but the embeddings' is launched before backward ends (its last notification).
  const BucketLaunches launches = bucket_launches(ddp_of(trainer).engine().timeline().events());
  CHECK(launches.comm_events == buckets);
  CHECK(launches.started_early + 1 >= buckets);
  // Each bucket starts at the notification that completes it: the first whose offset is at or
  // below the bucket's begin, as gradients become final from the end of the buffer backwards.
  // Orders, not times, so a bucket launched one notification late fails whatever the machine.
  const DataParallel& engine = ddp_of(trainer).engine();
  const std::vector<std::size_t>& offsets = engine.notified_offsets();
  const std::vector<int> launched = engine.launch_notifications();
  const auto& ranges = engine.bucket_ranges();
  REQUIRE(launched.size() == ranges.size());
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    int complete = -1;
    for (std::size_t k = 0; k < offsets.size() && complete < 0; ++k)
      if (offsets[k] <= ranges[i].first) complete = static_cast<int>(k);
    INFO("bucket " << i << " [" << ranges[i].first << ", " << ranges[i].second << "): complete at notification "
                   << complete << " of " << offsets.size() << ", launched at " << launched[i]
                   << " (-1: after backward, by finish_step)");
    CHECK(launched[i] == complete);
  }
}

TEST_CASE("ranks started with different settings fail on every rank with one message", "[ddp_mismatch]") {
  Communicator& world = test_world();
  if (world.size() < 2) {
    SUCCEED("one rank cannot disagree with itself");
    return;
  }
  const std::string data = tiny_shard();
  MemoryTracker tracker;
  TrainOptions o = tiny_options(data);
  if (world.rank() == world.size() - 1) o.seed = kSeed + 1;
  const std::string who = "ddp: rank " + std::to_string(world.size() - 1) + " was started with different settings";
  CHECK_THROWS_WITH(Trainer(o, &tracker, {}, ddp_strategy(world, DdpOptions{})),
                    Catch::Contains(who) && Catch::Contains("seed 5") &&
                        Catch::Contains("start every rank with the same"));
}

TEST_CASE("a batch that ranks x micro-batches does not divide is a clear error", "[ddp_errors]") {
  Communicator& world = test_world();
  if (world.size() < 2) return;
  MemoryTracker tracker;
  TrainOptions o = tiny_options(tiny_shard());
  o.batch = world.size() + 1;
  CHECK_THROWS_WITH(Trainer(o, &tracker, {}, ddp_strategy(world, DdpOptions{})),
                    Catch::Contains("batch: " + std::to_string(world.size() + 1) + " rows do not split into " +
                                    std::to_string(world.size()) + " ranks"));
}
