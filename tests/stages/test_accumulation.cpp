// Stage 01, gradient accumulation, against stage 00 from the reference.
//
// Why the bits differ: with k micro-batches each weight gradient is a sum of k partial matrix
// products (+= across micro-batches) instead of one product over all rows, and each micro-batch's
// loss gradient is (1/k)(1/(B/k T)) instead of 1/(B T); float addition is not associative, so
// the last bits change while the math is the same. Tolerance: |a - b| <= 1e-4 |b| + 1e-5 max|b|
// per tensor buffer (single-precision sums of a few hundred terms agree to ~1e-6 relative).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "activation_formula.hpp"
#include "batch.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "train/accumulate.hpp"
#include "train/fp32_model.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {
const prior::ModelShape kShape{64, 16, 32, 2, 4};  // V, T, C, L, NH (the tiny config)
constexpr int kB = 8, kT = 16;
constexpr std::uint64_t kSeed = 42;

}  // namespace

TEST_CASE("accumulating k micro-batches gives the gradients of the whole batch", "[graded][accum_equal]") {
  const Batch batch = random_batch(kShape.V, kB, kT, 7);
  const prior::StepResult want = prior::stage00_step(kShape, kSeed, batch.tokens, batch.targets, kB, kT);
  for (int k : {1, 2, 4, 8}) {
    MemoryTracker tracker;
    Fp32TrainModel model(config_from(kShape), &tracker);
    model.init_weights(kSeed);
    model.zero_grad();
    const double loss = accumulate_gradients(model, batch.tokens.data(), batch.targets.data(), kB, kT, k);
    INFO("k = " << k << " micro-batches of " << kB / k << " rows");
    CHECK(loss == Approx(want.loss).epsilon(1e-6));
    const std::vector<float> grads(model.gpt().grads(), model.gpt().grads() + model.num_params());
    CHECK_MATCH(compare_close("gradients vs stage 00", grads.data(), want.grads.data(), grads.size(), 1e-4,
                              1e-5 * max_abs(want.grads)));
  }
}

TEST_CASE("accumulation divides the activation memory by k (measured == formula)", "[graded][accum_memory]") {
  const Shape s{64, 32, 2, 4};
  const Batch batch = random_batch(kShape.V, kB, kT, 7);
  std::size_t peak_k1 = 0;
  for (int k : {1, 2, 4}) {
    MemoryTracker tracker;
    Fp32TrainModel model(config_from(kShape), &tracker);
    model.init_weights(kSeed);
    accumulate_gradients(model, batch.tokens.data(), batch.targets.data(), kB, kT, k);
    const std::size_t measured = tracker.peak(MemCategory::kActivations);
    const std::size_t formula = act_bytes_none(s, kB / k, kT);
    INFO("k = " << k << ": measured peak activation bytes " << measured << ", formula for B/k = " << kB / k << ": "
                << formula);
    CHECK(measured == formula);
    if (k == 1) peak_k1 = measured;
    // Every activation is linear in the rows of a micro-batch, so the peak falls exactly k-fold.
    CHECK(peak_k1 == measured * static_cast<std::size_t>(k));
  }
}

TEST_CASE("a batch that k does not divide is a clear error", "[accum_errors]") {
  MemoryTracker tracker;
  Fp32TrainModel model(config_from(kShape), &tracker);
  model.init_weights(kSeed);
  const Batch batch = random_batch(kShape.V, 6, kT, 7);
  CHECK_THROWS_AS(accumulate_gradients(model, batch.tokens.data(), batch.targets.data(), 6, kT, 4), ConfigError);
  CHECK_THROWS_WITH(accumulate_gradients(model, batch.tokens.data(), batch.targets.data(), 6, kT, 4),
                    Catch::Contains("grad_accum") && Catch::Contains("batch 6 is not divisible into 4") &&
                        Catch::Contains("choose a --grad-accum that divides --batch 6"));
  CHECK_THROWS_WITH(accumulate_gradients(model, batch.tokens.data(), batch.targets.data(), 6, kT, 0),
                    Catch::Contains("grad_accum: must be at least 1"));
}
