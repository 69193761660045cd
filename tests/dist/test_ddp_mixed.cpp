// Stage 04 with stage 03: data parallelism in bf16 and fp16, under mpiexec with 1-4 ranks. The
// half gradients travel and are summed in half (the Communicator's kBFloat16/kFloat16), as
// PyTorch's DDP does with a bf16 model, so they are checked against the independent value, the
// mixed-precision model on one process with d micro-batches of the same batch:
//   - one rank: bitwise (an all-reduce over one rank changes nothing);
//   - d ranks: each rank rounds its rows' gradients to half once and the sum rounds at each of
//     its d - 1 hops, while one process rounds once per micro-batch onto the running sum; every
//     rounding is at most half a unit in the last place u (bf16 2^-8, fp16 2^-11 relative), so
//     per tensor ||ddp - one|| <= d u ||one|| (measured at most 0.83 u at d = 2, 1.05 u
//     at d = 3 and 1.30 u at d = 4).
// Then the whole run: the trainer with --precision bf16/fp16 keeps every rank's parameters
// bitwise identical, and the ring (fp32 only) is refused by name.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "batch.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "ddp_fixtures.hpp"
#include "dist/ddp.hpp"
#include "precision/mixed_model.hpp"
#include "train/accumulate.hpp"
#include "train/trainer.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {
const prior::ModelShape kShape{64, 16, 32, 2, 4};
constexpr int kB = 12, kT = 16;  // 12 rows split over 1, 2, 3 or 4 ranks
constexpr std::uint64_t kSeed = 5;

// fp16 gradients of this model are small: a loss scale of 2^10 (exact) keeps them normal.
double loss_scale_for(HalfFormat f) { return f == HalfFormat::kFP16 ? 1024.0 : 1.0; }
double unit_roundoff(HalfFormat f) { return f == HalfFormat::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

TrainOptions tiny_options(const std::string& data, const std::string& precision) {
  TrainOptions o = tiny_ddp_options(data, kB, kSeed);
  o.precision = precision;
  return o;
}
}  // namespace

TEST_CASE("DDP in bf16 and fp16 equals the mixed model with d micro-batches", "[ddp_mixed]") {
  Communicator& world = test_world();
  const int d = world.size();
  const Batch batch = random_batch(kShape.V, kB, kT, 77);  // the same on every rank
  const GPTConfig config = config_from(kShape);
  for (HalfFormat format : {HalfFormat::kBF16, HalfFormat::kFP16}) {
    const double scale = loss_scale_for(format);
    MemoryTracker one_tracker;
    MixedPrecisionModel one(config, format, &one_tracker);
    one.init_weights(kSeed);
    one.zero_grad();
    const double want_loss = accumulate_gradients(one, batch.tokens.data(), batch.targets.data(), kB, kT, d, scale);
    const std::vector<float> want = one.grads_as_float();
    for (auto mode : {DdpOptions::Mode::kNaive, DdpOptions::Mode::kBucketed}) {
      INFO(where(world) << ", " << half_format_name(format) << ", "
                        << (mode == DdpOptions::Mode::kNaive ? "naive" : "bucketed"));
      MemoryTracker tracker;
      MixedPrecisionModel model(config, format, &tracker);
      model.init_weights(kSeed);
      model.zero_grad();
      DataParallel ddp(world, model, small_buckets(mode, DdpOptions::Algorithm::kBuiltin));
      const int local = kB / d;
      const std::size_t offset = static_cast<std::size_t>(world.rank()) * local * kT;
      ddp.begin_step(1);
      double loss = accumulate_gradients(model, batch.tokens.data() + offset, batch.targets.data() + offset, local, kT,
                                         1, scale / d);
      ddp.finish_step();
      world.all_reduce(&loss, 1);
      CHECK(loss / d == Approx(want_loss).epsilon(1e-12));
      const std::vector<float> got = model.grads_as_float();
      if (d == 1) {
        CHECK_MATCH(compare_bitwise("gradients vs one process", got.data(), want.data(), want.size()));
        continue;
      }
      for (const auto& t : model.layout().tensors()) {
        const double err = relative_norm_error(got.data() + t.offset, want.data() + t.offset, t.numel);
        INFO(t.name << ": ||ddp - one|| / ||one|| = " << err / unit_roundoff(format) << " u (bound " << d << " u)");
        CHECK(err <= d * unit_roundoff(format));
      }
    }
  }
}

TEST_CASE("DDP buckets of half gradients hold twice the elements and start during backward", "[ddp_mixed]") {
  Communicator& world = test_world();
  MemoryTracker tracker;
  MixedPrecisionModel model(config_from(kShape), HalfFormat::kBF16, &tracker);
  model.init_weights(kSeed);
  const DdpOptions opts = small_buckets(DdpOptions::Mode::kBucketed, DdpOptions::Algorithm::kBuiltin);
  DataParallel ddp(world, model, opts);
  CHECK(ddp.bucket_ranges() == plan_buckets(model.layout(), 2 * opts.first_bucket_bytes, 2 * opts.bucket_bytes));
  const Batch batch = random_batch(kShape.V, 2, kT, 3);
  model.zero_grad();
  ddp.begin_step(1);
  model.forward(batch.tokens.data(), batch.targets.data(), 2, kT);
  model.backward(1.0);
  ddp.finish_step();
  const BucketLaunches launches = bucket_launches(ddp.timeline().events());
  INFO(where(world) << ": " << launches.started_early << " of " << launches.comm_events
                    << " buckets before backward ended");
  CHECK(launches.comm_events == ddp.bucket_ranges().size());
  CHECK(launches.started_early + 1 >= ddp.bucket_ranges().size());
}

TEST_CASE("the trainer in bf16 and fp16 under DDP keeps every rank's parameters identical", "[ddp_mixed]") {
  Communicator& world = test_world();
  const std::string data = tiny_token_shard(world, "scalelab_ddp_mixed_tiny.bin");
  for (const char* precision : {"bf16", "fp16"}) {
    INFO(where(world) << ", " << precision);
    MemoryTracker tracker;
    TrainOptions o = tiny_options(data, precision);
    o.grad_accum = kB % (2 * world.size()) == 0 ? 2 : 1;
    Trainer trainer(o, &tracker, {},
                    ddp_strategy(world, small_buckets(DdpOptions::Mode::kBucketed, DdpOptions::Algorithm::kBuiltin)));
    const ReplicaRun run = train_replica(trainer, world, 5);
    CHECK(run.last_loss < run.first_loss);  // it trains
    CHECK_MATCH(
        compare_bitwise("master weights vs rank 0 after 5 steps", run.mine.data(), run.root.data(), run.mine.size()));
  }
}

TEST_CASE("half gradients put half the bytes on the wire", "[ddp_mixed]") {
  Communicator& world = test_world();
  const std::string data = tiny_token_shard(world, "scalelab_ddp_mixed_tiny.bin");
  std::uint64_t sent[2] = {0, 0};
  const char* precisions[2] = {"fp32", "bf16"};
  for (int k = 0; k < 2; ++k) {
    MemoryTracker tracker;
    const TrainOptions o = tiny_options(data, precisions[k]);
    // Naive: one all-reduce per tensor in both precisions, so the same calls of the same counts.
    Trainer trainer(o, &tracker, {},
                    ddp_strategy(world, small_buckets(DdpOptions::Mode::kNaive, DdpOptions::Algorithm::kBuiltin)));
    sent[k] = trainer.step().comm_bytes_sent;
  }
  INFO(where(world) << ": fp32 " << sent[0] << " bytes, bf16 " << sent[1] << " bytes per step");
  CHECK(2 * sent[1] == sent[0]);
  CHECK((world.size() == 1 || sent[1] > 0));
}

TEST_CASE("the ring all-reduce, fp32 only, is refused for half gradients by name", "[ddp_mixed]") {
  Communicator& world = test_world();
  MemoryTracker tracker;
  MixedPrecisionModel model(config_from(kShape), HalfFormat::kFP16, &tracker);
  CHECK_THROWS_WITH(DataParallel(world, model, small_buckets(DdpOptions::Mode::kNaive, DdpOptions::Algorithm::kRing)),
                    "allreduce: ring (comm/ring.hpp) adds fp32 gradients, and this model keeps them in half; use "
                    "--allreduce builtin with --precision bf16 or fp16");
}
