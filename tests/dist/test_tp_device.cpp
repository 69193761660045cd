// Stage 06's device path (--tp T --device cuda) on any machine: the strategy with a CPU twin of
// the GPU chunk (host_copy_tp_chunk.hpp) against the CPU tensor-parallel strategy, on 1-4 ranks
// (and 2 x 2 as dp x tp with ZeRO-1 on 4), with and without sequence parallelism. The twin
// computes what the CPU shard computes, so
// everything is bitwise equal; what is tested is the host side of the split: the parameters
// loaded once per step, the gradients stored once, the optimizer, the data-parallel reduction
// and ZeRO-1 on the host buffers, under sequence parallelism the replicated gradients' parts
// summed on the host (and that all-reduce in the chunk's ledger), the device's memory counted apart. The GPU's
// arithmetic is tests/gpu/ddp/test_gpu_tp.cpp's.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "batch.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "ddp_fixtures.hpp"
#include "host_copy_tp_chunk.hpp"
#include "prior_stage.hpp"
#include "tp_harness.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {
const prior::ModelShape kShape{65, 8, 48, 2, 12};  // V = 65: padded vocabulary rows for every t > 1
constexpr int kRows = 6;  // 6 x 8 = 48 token rows a micro-batch: they split over t = 1..4 (sequence parallelism)
constexpr std::uint64_t kSeed = 23;

GPTConfig config() { return gpt_config_of_shape(kShape.V, kShape.T, kShape.C, kShape.L, kShape.NH, "tp-device"); }

void check_same_ledger(const std::vector<TpCollective>& got, const std::vector<TpCollective>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("ledger entry " << i << ": " << got[i].where << " vs " << want[i].where);
    CHECK(got[i].op == want[i].op);
    CHECK(got[i].elements == want[i].elements);
    CHECK(got[i].where == want[i].where);
    CHECK(got[i].element_bytes == want[i].element_bytes);
  }
}
}  // namespace

TEST_CASE("the shard's device path (--device cuda) equals the CPU shard, with a CPU twin of the GPU chunk",
          "[tp_device_path]") {
  Communicator& world = test_world();
  const int n = world.size();
  struct Layout {
    int tp, zero;
  };
  std::vector<Layout> layouts = {{n, 0}};
  if (n == 4) layouts.push_back({2, 1});
  for (const Layout& l : layouts) {
    for (const std::string precision : {"fp32", "bf16"})
      for (bool sp : {false, true}) {
        const int dp = n / l.tp, m = 2, B = kRows * m * dp;
        const Batch batch = random_batch(kShape.V, B, kShape.T, 5);
        INFO(where(world) << ", tp " << l.tp << ", dp " << dp << ", zero " << l.zero << ", " << precision
                          << (sp ? ", sequence parallel" : ""));
        TpHarness cpu(world, config(), l.tp, sp, m, B, kShape.T, kSeed, {}, precision, 1.0, l.zero);
        TpHarness dev(world, config(), l.tp, sp, m, B, kShape.T, kSeed, {}, precision, 1.0, l.zero,
                      HostCopyTpChunk::factory());
        TpShardModel& shard = dev.any_shard();
        REQUIRE(shard.device_memory() != nullptr);
        CHECK(cpu.any_shard().device_memory() == nullptr);
        const std::size_t element = precision == "fp32" ? 4 : 2, bytes = shard.num_params() * element;
        // The "device" holds the shard's parameters and gradients once each; the optimizer stays on the host.
        CHECK(shard.device_memory()->current(MemCategory::kParams) == bytes);
        CHECK(shard.device_memory()->current(MemCategory::kGrads) == bytes);
        CHECK(shard.device_memory()->current(MemCategory::kOptimizer) == 0);
        CHECK(dev.tracker.current(MemCategory::kOptimizer) == cpu.tracker.current(MemCategory::kOptimizer));
        for (int step = 0; step < 3; ++step) {
          const double want = cpu.forward_backward(batch.tokens, batch.targets);
          const double got = dev.forward_backward(batch.tokens, batch.targets);
          CHECK(got == want);
          const TrainModel::GradBuffer a = dev.model->typed_grads(), b = cpu.model->typed_grads();
          INFO("step " << step << ": the shard's gradients after the sync, device path vs CPU, bit for bit");
          CHECK(std::memcmp(a.data, b.data, bytes) == 0);
          check_same_ledger(dev.strategy->step_ledger(), cpu.strategy->step_ledger());
          CHECK(dev.strategy->step_report().bytes_sent == cpu.strategy->step_report().bytes_sent);
          cpu.update();
          dev.update();
        }
        CHECK_MATCH(compare_bitwise("master weights after 3 steps, device path vs CPU", dev.model->master_params(),
                                    cpu.model->master_params(), dev.model->num_params()));
        // A validation forward after the last update loads the updated parameters first.
        const double eval_cpu = cpu.strategy->evaluate(*cpu.model, batch.tokens.data(), batch.targets.data(), B,
                                                       kShape.T);
        const double eval_dev = dev.strategy->evaluate(*dev.model, batch.tokens.data(), batch.targets.data(), B,
                                                       kShape.T);
        CHECK(eval_dev == eval_cpu);
        const auto& chunk = dynamic_cast<const HostCopyTpChunk&>(dynamic_cast<DeviceTpShardModel&>(shard).chunk());
        CHECK(chunk.loads() == 4);  // once per step, once for the evaluation
        CHECK(chunk.stores() == 3);
        CHECK(dev.strategy->report().find("GPU memory of this rank's shard") != std::string::npos);
        CHECK(cpu.strategy->report().find("GPU memory") == std::string::npos);
        CHECK(dev.strategy->describe().find("on the GPU") != std::string::npos);
      }
  }
}

TEST_CASE("tensor parallelism on a device without GPU shards is refused on every rank", "[tp_device_path]") {
  Communicator& world = test_world();
  INFO(where(world));
  TrainOptions o;
  o.parallel.tp = world.size();
  o.device = "cuda";
  CHECK_THROWS_WITH(TensorParallelStrategy(world, o), Catch::Contains("gave it no GPU shards"));
}
