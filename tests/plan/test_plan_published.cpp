// The planner's model-state bytes against published tables (docs/planner.md cites them):
//  - the ZeRO paper (Rajbhandari et al. 2020, figure 1): psi = 7.5 B parameters, N_d = 64 GPUs,
//    mixed-precision Adam (K = 12): 120 GB baseline, 31.4 GB (P_os), 16.6 GB (P_os+g), 1.9 GB
//    (P_os+g+p) per GPU;
//  - Megatron-LM's distributed optimizer (docs/source/api-guide/dist_optimizer.md): bytes per
//    parameter fp32/fp32 16 -> 8 + 8/d, bf16 params with fp32 grads 18 -> 6 + 12/d.
// GB here is 1e9 bytes, as both use it; the tolerance is the rounding of the published digits.
#include <catch2/catch.hpp>

#include "plan/plan_memory.hpp"
#include "plan/plan_model.hpp"

using namespace scalelab;

TEST_CASE("ZeRO paper, figure 1: 7.5B parameters on 64 GPUs", "[plan]") {
  const std::size_t psi = 7'500'000'000;
  const double published[] = {120.0, 31.4, 16.6, 1.9};
  const double digits[] = {0.05, 0.05, 0.05, 0.05};
  for (int zero = 0; zero <= 3; ++zero) {
    const double gb = model_state_memory(state_bytes("bf16"), zero, psi, 64).total() / 1e9;
    INFO("stage " << zero << ": planner " << gb << " GB, paper " << published[zero] << " GB");
    CHECK(std::abs(gb - published[zero]) <= digits[zero]);
  }
}

TEST_CASE("Megatron-LM's distributed optimizer table: bytes per parameter", "[plan]") {
  const std::size_t psi = 1'000'000'000'000;  // large, so the shard's rounding is below 1e-9
  for (int d : {1, 2, 8, 64}) {
    const double fp32 = model_state_memory(state_bytes("fp32"), 1, psi, d).total() / psi;
    const double bf16 = model_state_memory(state_bytes("bf16-fp32-grads"), 1, psi, d).total() / psi;
    INFO("d " << d << ": fp32 " << fp32 << " (table 8 + 8/d), bf16/fp32 grads " << bf16 << " (table 6 + 12/d)");
    CHECK(fp32 == Approx(8 + 8.0 / d).epsilon(1e-9));
    CHECK(bf16 == Approx(6 + 12.0 / d).epsilon(1e-9));
    // Without the distributed optimizer: 16 and 18 bytes per parameter.
    CHECK(model_state_memory(state_bytes("fp32"), 0, psi, d).total() / psi == 16);
    CHECK(model_state_memory(state_bytes("bf16-fp32-grads"), 0, psi, d).total() / psi == 18);
  }
}

TEST_CASE("published shapes have their published parameter counts", "[plan]") {
  // GPT-2's released checkpoints (tied head, no padding): 124,439,808 and 1,557,611,200.
  CHECK(model_params(plan_model_by_name("gpt2-124m").config) == 124'439'808);
  CHECK(model_params(plan_model_by_name("gpt2-1.5b").config) == 1'557'611'200);
  // GPT-3 175B: "175 billion" (table 2.1 reports 175.0B).
  const double gpt3 = static_cast<double>(model_params(plan_model_by_name("gpt3-175b").config));
  CHECK(gpt3 == Approx(175e9).epsilon(0.005));
}
