// Stage 03, the mixed-precision model on one batch: against fp32 (stage 00 from the reference),
// its memory against the 2+2+4+8 bytes/param and half-activation formulas, checkpointing in
// half, fp16's underflow without a loss scale, and the skipped step on inf/NaN gradients.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "activation_formula.hpp"
#include "batch.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "optim/adamw.hpp"
#include "precision/mixed_model.hpp"
#include "precision_support.hpp"
#include "train/fp32_model.hpp"
#include "train/trainer.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {
const prior::ModelShape kTiny{64, 16, 32, 2, 4};  // V, T, C, L, NH: the tiny config
constexpr int kB = 4, kT = 16;
constexpr std::uint64_t kSeed = 9;
const HalfFormat kFormats[] = {HalfFormat::kBF16, HalfFormat::kFP16};

struct Run {
  double loss;
  std::vector<float> grads;  // widened, loss scale divided out
  std::vector<std::uint16_t> half_grads;
  std::size_t act_peak, block_forwards, attention_recomputes;
};

Run run_model(const prior::ModelShape& shape, HalfFormat format, const std::string& policy, const Batch& batch, int B,
              double loss_scale) {
  MemoryTracker tracker;
  MixedPrecisionModel model(config_from(shape), format, &tracker);
  model.init_weights(kSeed);
  model.set_checkpoint_policy(CheckpointPolicy::parse(policy));
  Run r;
  r.loss = model.forward(batch.tokens.data(), batch.targets.data(), B, shape.T);
  model.backward(loss_scale);
  r.grads = model.grads_as_float();
  for (float& g : r.grads) g = static_cast<float>(g / loss_scale);
  r.half_grads.assign(model.half_grads(), model.half_grads() + model.num_params());
  r.act_peak = tracker.peak(MemCategory::kActivations);
  r.block_forwards = model.block_forward_count();
  r.attention_recomputes = model.attention_recompute_count();
  return r;
}

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }
}  // namespace

// Why not bitwise: every layer output, activation gradient and parameter gradient is rounded to
// half (8 significant bits for bf16, 11 for fp16), so the gradients carry relative errors of a
// few 2^-9 (bf16) or 2^-12 (fp16) from each of the ~20 roundings on their path. Tolerance per
// element: |a - b| <= 0.1 |b| + 0.02 max|b| (bf16), 0.02 |b| + 0.005 max|b| (fp16); the loss within
// 1e-3. Measured on this batch: max abs error 0.75% (bf16) and 0.11% (fp16) of max|b|.
TEST_CASE("mixed-precision gradients match fp32 (stage 00) within the half formats' precision",
          "[graded][mixed_vs_fp32]") {
  const Batch batch = random_batch(kTiny.V, kB, kT, 3);
  const prior::StepResult want = prior::stage00_step(kTiny, kSeed, batch.tokens, batch.targets, kB, kT);
  const double gmax = max_abs(want.grads);
  for (HalfFormat f : kFormats) {
    for (double scale : {1.0, 65536.0}) {
      if (f == HalfFormat::kBF16 && scale != 1.0) continue;  // bf16 trains without a scaler
      const Run r = run_model(kTiny, f, "none", batch, kB, scale);
      const bool bf16 = f == HalfFormat::kBF16;
      INFO(half_format_name(f) << ", loss scale " << scale << ": loss " << r.loss << " vs fp32 " << want.loss);
      CHECK(std::fabs(r.loss - want.loss) <= 1e-3);
      CHECK_MATCH(compare_close("gradients vs fp32 stage 00", r.grads.data(), want.grads.data(), r.grads.size(),
                                bf16 ? 0.1 : 0.02, (bf16 ? 0.02 : 0.005) * gmax));
    }
  }
}

TEST_CASE("bytes per parameter are 2 + 2 + 4 + 8 and activations half of fp32 (measured == formula)",
          "[graded][mixed_memory]") {
  const Shape s{64, 32, 2, 4};
  const Batch batch = random_batch(kTiny.V, kB, kT, 3);
  for (HalfFormat f : kFormats) {
    MemoryTracker tracker;
    MixedPrecisionModel model(config_from(kTiny), f, &tracker);
    const std::size_t N = model.num_params();
    INFO(half_format_name(f) << ", " << N << " parameters: params " << tracker.current(MemCategory::kParams)
                             << " B, grads " << tracker.current(MemCategory::kGrads) << " B, master (optimizer) "
                             << tracker.current(MemCategory::kOptimizer) << " B");
    CHECK(tracker.current(MemCategory::kParams) == 2 * N);     // half parameters
    CHECK(tracker.current(MemCategory::kGrads) == 2 * N);      // half gradients
    CHECK(tracker.current(MemCategory::kOptimizer) == 4 * N);  // fp32 master weights
    AdamW adam(N, AdamWConfig{}, &tracker);
    INFO("with AdamW: optimizer " << tracker.current(MemCategory::kOptimizer) << " B");
    CHECK(tracker.current(MemCategory::kOptimizer) == (4 + 8) * N);  // + m and v in fp32
    const std::size_t model_state = tracker.current(MemCategory::kParams) + tracker.current(MemCategory::kGrads) +
                                    tracker.current(MemCategory::kOptimizer);
    CHECK(model_state == 16 * N);  // the same 16 bytes/param as fp32 Adam (4 + 4 + 8)
  }
  // Activations: a fresh model per policy, so the peak is that policy's alone.
  for (HalfFormat f : kFormats) {
    for (const char* policy : {"none", "every:1", "selective"}) {
      MemoryTracker tracker;
      MixedPrecisionModel model(config_from(kTiny), f, &tracker);
      const std::size_t N = model.num_params();
      AdamW adam(N, AdamWConfig{}, &tracker);
      model.init_weights(kSeed);
      model.set_checkpoint_policy(CheckpointPolicy::parse(policy));
      model.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
      model.backward(1.0);
      model.optimizer_step(adam, 1e-3, 1.0, 0.0);
      const std::string p(policy);
      const std::size_t fp32_bytes = p == "none"        ? act_bytes_none(s, kB, kT)
                                     : p == "selective" ? act_bytes_selective(s, kB, kT)
                                                        : act_bytes_segments(s, kB, kT, 1);
      const std::size_t measured = tracker.peak(MemCategory::kActivations);
      INFO(half_format_name(f) << ", policy " << policy << ": measured activation peak " << measured
                               << " B; fp32 formula " << fp32_bytes << " B, half of it " << fp32_bytes / 2 << " B");
      CHECK(measured * 2 == fp32_bytes);
      // Parameters, gradients and master weights never grow during a step.
      CHECK(tracker.peak(MemCategory::kParams) == 2 * N);
      CHECK(tracker.peak(MemCategory::kGrads) == 2 * N);
      CHECK(tracker.peak(MemCategory::kOptimizer) == 12 * N);
    }
  }
}

// Recomputing a block in half repeats the same widen-compute-round operations on the same half
// inputs, so checkpointing stays bitwise exact inside mixed precision too.
TEST_CASE("checkpoint policies in half: gradients bitwise equal, activations half the formula",
          "[graded][mixed_checkpointing]") {
  const prior::ModelShape shape{64, 16, 32, 6, 4};  // L = 6 so that segments can be uneven
  const Shape s{64, 32, 6, 4};
  const std::size_t L = 6;
  const Batch batch = random_batch(shape.V, kB, kT, 3);
  struct Expect {
    const char* policy;
    std::size_t fp32_bytes, extra_forwards;
  };
  const Expect cases[] = {{"every", act_bytes_segments(s, kB, kT, 1), L - 1},
                          {"every:2", act_bytes_segments(s, kB, kT, 2), L - 2},
                          {"every:4", act_bytes_segments(s, kB, kT, 4), L - 2},
                          {"every:6", act_bytes_segments(s, kB, kT, 6), 0},
                          {"sqrt", act_bytes_segments(s, kB, kT, 2), L - 2},  // round(sqrt(6)) = 2
                          {"selective", act_bytes_selective(s, kB, kT), 0}};
  for (HalfFormat f : kFormats) {
    const Run none = run_model(shape, f, "none", batch, kB, 1.0);
    CHECK(none.act_peak * 2 == act_bytes_none(s, kB, kT));
    for (const Expect& c : cases) {
      const Run r = run_model(shape, f, c.policy, batch, kB, 1.0);
      INFO(half_format_name(f) << ", policy " << c.policy << ": activation peak " << r.act_peak
                               << " B, half the fp32 formula " << c.fp32_bytes / 2 << " B; " << r.block_forwards
                               << " block forwards, expected " << L + c.extra_forwards);
      CHECK(bits(static_cast<float>(r.loss)) == bits(static_cast<float>(none.loss)));
      CHECK_MATCH(compare_bitwise("half gradients vs policy none", r.half_grads.data(), none.half_grads.data(),
                                  r.half_grads.size()));
      CHECK(r.act_peak * 2 == c.fp32_bytes);
      CHECK(r.block_forwards == L + c.extra_forwards);
      if (std::string(c.policy) == "selective") CHECK(r.attention_recomputes == L - 1);
    }
  }
}

// The constructed case. A big model's gradients are small (means over millions of positions,
// products of many small factors); the tiny model's are not, so the loss is weighted by 2^-10 to
// make them so. A power of two: the fp32 gradients are exactly stage 00's times 2^-10. fp16's
// smallest subnormal is 2^-24, so every gradient below 2^-25 (and every activation gradient on
// its way there) becomes exactly zero without a loss scale. With the scaler's 2^16 they are
// 2^16 times larger while in fp16, and survive.
TEST_CASE("fp16 without loss scaling flushes small gradients to zero; the scaled run keeps them",
          "[graded][fp16_underflow]") {
  // By hand first: 2^-26 flushes, 2^-26 * 2^16 = 2^-10 is exact and unscales back to 2^-26.
  CHECK(float_to_fp16(std::ldexp(1.0f, -26)) == 0);
  CHECK(fp16_to_float(float_to_fp16(std::ldexp(1.0f, -26) * 65536.0f)) / 65536.0f == std::ldexp(1.0f, -26));

  const double weight = std::ldexp(1.0, -10);
  const Batch batch = random_batch(kTiny.V, kB, kT, 3);
  const std::vector<float> want = prior::stage00_step(kTiny, kSeed, batch.tokens, batch.targets, kB, kT).grads;
  // Both runs come back divided by their whole factor (weight, or weight * 2^16): in units of the
  // unweighted gradient, comparable with stage 00's.
  const Run plain = run_model(kTiny, HalfFormat::kFP16, "none", batch, kB, weight);
  const Run scaled = run_model(kTiny, HalfFormat::kFP16, "none", batch, kB, weight * 65536.0);
  std::size_t nonzero = 0, below_half_subnormal = 0, lost_plain = 0, lost_scaled = 0, kept = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (want[i] == 0) continue;
    ++nonzero;
    if (std::fabs(want[i] * weight) <= std::ldexp(1.0, -25)) ++below_half_subnormal;
    if (plain.grads[i] == 0) {
      ++lost_plain;
      if (scaled.grads[i] != 0) ++kept;
    }
    if (scaled.grads[i] == 0) ++lost_scaled;
  }
  const double gmax = max_abs(want);
  const Comparison err_plain = compare_close("fp16 unscaled", plain.grads.data(), want.data(), want.size(), 0, 0);
  const Comparison err_scaled = compare_close("fp16 scaled", scaled.grads.data(), want.data(), want.size(), 0, 0);
  INFO("of " << nonzero << " nonzero fp32 gradients (" << below_half_subnormal
             << " of them at most 2^-25, half fp16's smallest subnormal): fp16 without scaling flushed " << lost_plain
             << " to zero, with loss scale 2^16 " << lost_scaled << " (and kept " << kept << " of the " << lost_plain
             << "); max abs error " << err_plain.max_abs_err / gmax << " vs " << err_scaled.max_abs_err / gmax
             << " of max|g|");
  CHECK(lost_plain >= nonzero / 10);            // measured: 4367 of 28032
  CHECK(lost_scaled <= nonzero / 1000);         // measured: 4
  CHECK(kept >= lost_plain - lost_scaled);      // the scaled run keeps what the plain one lost
  CHECK(err_plain.max_abs_err > 0.05 * gmax);   // measured: 14% of the largest gradient
  CHECK(err_scaled.max_abs_err < 0.01 * gmax);  // measured: 0.09%
}

TEST_CASE("inf/NaN gradients skip the step: parameters and Adam state bitwise unchanged", "[graded][mixed_skip]") {
  const Batch batch = random_batch(kTiny.V, kB, kT, 3);
  for (HalfFormat f : kFormats) {
    INFO(half_format_name(f));
    MemoryTracker tracker;
    MixedPrecisionModel model(config_from(kTiny), f, &tracker);
    model.init_weights(kSeed);
    AdamW adam(model.num_params(), AdamWConfig{.lr = 1e-3}, &tracker);
    const std::size_t N = model.num_params();
    // One good step first, so that m and v are not zero.
    model.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
    model.backward(1.0);
    REQUIRE_FALSE(model.optimizer_step(adam, 1e-3, 1.0, 0.0).skipped);
    const std::vector<float> master(model.master_params(), model.master_params() + N);
    const std::vector<std::uint16_t> half(model.half_params(), model.half_params() + N);
    const std::vector<float> m(adam.m(), adam.m() + N), v(adam.v(), adam.v() + N);
    // A poisoned backward: an infinite loss scale makes the gradients inf and NaN.
    model.zero_grad();
    model.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
    model.backward(INFINITY);
    const auto outcome = model.optimizer_step(adam, 1e-3, 1.0, 1.0);
    CHECK(outcome.skipped);
    CHECK_FALSE(std::isfinite(outcome.grad_norm));
    CHECK(adam.step_count() == 1);
    CHECK_MATCH(compare_bitwise("master weights after a skipped step", model.master_params(), master.data(), N));
    CHECK_MATCH(compare_bitwise("half parameters after a skipped step", model.half_params(), half.data(), N));
    CHECK_MATCH(compare_bitwise("Adam m after a skipped step", adam.m(), m.data(), N));
    CHECK_MATCH(compare_bitwise("Adam v after a skipped step", adam.v(), v.data(), N));
    // Clean gradients again: the step goes through and the half parameters follow the master.
    model.zero_grad();
    model.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
    model.backward(1.0);
    CHECK_FALSE(model.optimizer_step(adam, 1e-3, 1.0, 0.0).skipped);
    CHECK(adam.step_count() == 2);
    std::vector<std::uint16_t> rounded(N);
    float_to_half(rounded.data(), model.master_params(), N, f);
    CHECK_MATCH(compare_bitwise("half parameters vs the rounded master", model.half_params(), rounded.data(), N));
    CHECK_FALSE(compare_bitwise("master weights after a step", model.master_params(), master.data(), N).ok);
  }
}

// The step's arithmetic on each gradient is the fp32 model's: with the same (exactly
// representable) gradients both give bitwise the same master weights, with and without clipping.
TEST_CASE("the chunked mixed step equals the fp32 step on the same gradients", "[graded][mixed_step]") {
  const Batch batch = random_batch(kTiny.V, kB, kT, 3);
  for (double clip : {0.0, 0.05}) {
    MemoryTracker tracker;
    MixedPrecisionModel mixed(config_from(kTiny), HalfFormat::kBF16, &tracker);
    mixed.init_weights(kSeed);
    mixed.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
    mixed.backward(4.0);
    // The fp32 model, given the mixed model's master weights and its gradients (widened).
    Fp32TrainModel fp32(config_from(kTiny), &tracker);
    fp32.set_master_params(mixed.master_params());
    const std::vector<float> g = mixed.grads_as_float();
    std::copy(g.begin(), g.end(), fp32.gpt().grads());
    AdamW a1(mixed.num_params(), AdamWConfig{}, &tracker), a2(mixed.num_params(), AdamWConfig{}, &tracker);
    const auto r1 = mixed.optimizer_step(a1, 1e-3, 0.25, clip);
    const auto r2 = fp32.optimizer_step(a2, 1e-3, 0.25, clip);
    INFO("clip " << clip << ": grad norm " << r1.grad_norm << " (mixed) vs " << r2.grad_norm << " (fp32)");
    CHECK(r1.grad_norm == r2.grad_norm);
    CHECK_MATCH(compare_bitwise("master weights vs the fp32 step", mixed.master_params(), fp32.master_params(),
                                mixed.num_params()));
    CHECK_MATCH(compare_bitwise("Adam v vs the fp32 step", a1.v(), a2.v(), mixed.num_params()));
    // The step ends by rounding the updated master weights: the parameters the next forward uses.
    std::vector<std::uint16_t> rounded(mixed.num_params());
    float_to_half(rounded.data(), mixed.master_params(), mixed.num_params(), HalfFormat::kBF16);
    CHECK_MATCH(compare_bitwise("half parameters vs the rounded master weights after the step", mixed.half_params(),
                                rounded.data(), mixed.num_params()));
  }
}

// The model's own buffers fit in one chunk; a large model's do not. The same step in chunks of
// 1,000 (not a divisor of N, so the last chunk is short) must give bitwise the same result: each
// pass over the chunks must unscale its own chunk, not reuse the last one of the norm pass. And a
// pipeline stage's norm (MixedNorm: the share of the sum this rank counts, then the whole model's
// total) must be the one the step clips with.
TEST_CASE("the mixed step in short chunks, and with a norm shared across ranks, equals the whole step",
          "[graded][mixed_step]") {
  const Batch batch = random_batch(kTiny.V, kB, kT, 5);
  MemoryTracker tracker;
  MixedPrecisionModel mixed(config_from(kTiny), HalfFormat::kBF16, &tracker);
  mixed.init_weights(kSeed);
  mixed.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
  mixed.backward(4.0);
  const std::size_t N = mixed.num_params(), kChunk = 1000;
  REQUIRE(N > 3 * kChunk);
  REQUIRE(N % kChunk != 0);
  const std::vector<float> master0(mixed.master_params(), mixed.master_params() + N);
  const std::vector<std::uint16_t> half0(mixed.half_params(), mixed.half_params() + N);
  // The unscaled gradients' squares in fp64, split by the parity of the element: a "rank" that
  // counts the even elements, and the rest of the model's sum as if from the other ranks.
  const std::vector<float> g = mixed.grads_as_float();
  double even = 0, odd = 0;
  for (std::size_t i = 0; i < N; ++i) (i % 2 ? odd : even) += double(g[i] * 0.25f) * (g[i] * 0.25f);
  const double clip = 0.05;
  REQUIRE(std::sqrt(even + odd) > clip);  // the clip coefficient depends on the norm

  AdamW whole_adam(N, AdamWConfig{}, &tracker);
  const auto whole = mixed.optimizer_step(whole_adam, 1e-3, 0.25, clip);
  INFO("N = " << N << " parameters, chunks of " << kChunk);
  CHECK(whole.grad_norm == Approx(std::sqrt(even + odd)).epsilon(1e-12));

  for (bool shared : {false, true}) {
    // The workspace with 16 guard values past its end, which the step must not touch.
    constexpr float kGuard = 7.0f;
    std::vector<float> master = master0, chunk(kChunk + 16, kGuard);
    std::vector<std::uint16_t> half = half0;
    const MixedStepBuffers buffers{master.data(), half.data(), mixed.half_grads(), N, HalfFormat::kBF16,
                                   chunk.data(),  kChunk};
    std::vector<int> counted(N, 0);
    MixedNorm norm;
    if (shared) {
      norm.share = [&](const float* gc, std::size_t offset, std::size_t count) {
        double s = 0;
        for (std::size_t i = 0; i < count; ++i) {
          ++counted[offset + i];
          if ((offset + i) % 2 == 0) s += double(gc[i]) * gc[i];
        }
        return s;
      };
      norm.total = [&](double mine) { return mine + odd; };
    }
    AdamW adam(N, AdamWConfig{}, &tracker);
    const auto out = mixed_optimizer_step(adam, buffers, 1e-3, 0.25, clip, norm);
    INFO((shared ? "with a norm shared across ranks" : "the model's own norm")
         << ": grad norm " << out.grad_norm << " vs " << whole.grad_norm);
    CHECK_MATCH(compare_guards("the step's workspace", chunk, kChunk, kGuard));  // nothing written past chunk_size
    if (shared) {
      CHECK(std::count(counted.begin(), counted.end(), 1) == std::ptrdiff_t(N));  // every element shared once
      CHECK(out.grad_norm == Approx(whole.grad_norm).epsilon(1e-12));             // the same sum in another order
    } else {
      CHECK(out.grad_norm == whole.grad_norm);
      CHECK_MATCH(compare_bitwise("master weights, chunked vs whole", master.data(), mixed.master_params(), N));
      CHECK_MATCH(compare_bitwise("half parameters, chunked vs whole", half.data(), mixed.half_params(), N));
      CHECK_MATCH(compare_bitwise("Adam v, chunked vs whole", adam.v(), whole_adam.v(), N));
    }
  }
}

TEST_CASE("the master weights start as the fp32 initialisation, the parameters as its rounding", "[mixed_init]") {
  MemoryTracker tracker;
  Fp32TrainModel fp32(config_from(kTiny), &tracker);
  fp32.init_weights(kSeed);
  for (HalfFormat f : kFormats) {
    MixedPrecisionModel model(config_from(kTiny), f, &tracker);
    model.init_weights(kSeed);
    const std::size_t N = model.num_params();
    CHECK_MATCH(compare_bitwise("master vs fp32 init", model.master_params(), fp32.master_params(), N));
    std::vector<std::uint16_t> rounded(N);
    float_to_half(rounded.data(), fp32.master_params(), N, f);
    CHECK_MATCH(compare_bitwise("half params vs rounded init", model.half_params(), rounded.data(), N));
    CHECK(model.precision_name() == half_format_name(f));
  }
}

TEST_CASE("mixed-precision errors are clear", "[mixed_errors]") {
  MemoryTracker tracker;
  CHECK_THROWS_WITH(make_train_model(config_from(kTiny), "fp8", &tracker),
                    Catch::Contains("precision: unknown precision 'fp8'") && Catch::Contains("use fp32, bf16 or fp16"));
  MixedPrecisionModel model(config_from(kTiny), HalfFormat::kFP16, &tracker);
  model.init_weights(kSeed);
  CHECK_THROWS_WITH(model.backward(1.0), Catch::Contains("backward() called before forward()"));
  Batch batch = random_batch(kTiny.V, 1, kT, 3);
  batch.tokens[5] = 64;
  CHECK_THROWS_WITH(model.forward(batch.tokens.data(), batch.targets.data(), 1, kT),
                    Catch::Contains("tokens: id 64 at position 5 is outside the vocabulary [0, 64)") &&
                        Catch::Contains("tokenize with a vocabulary that matches the model"));
  batch.tokens[5] = 0;
  batch.targets[2] = -1;
  CHECK_THROWS_WITH(model.forward(batch.tokens.data(), batch.targets.data(), 1, kT),
                    Catch::Contains("targets: id -1 at position 2"));
  CHECK_THROWS_WITH(model.forward(batch.tokens.data(), batch.targets.data(), 1, kT + 1),
                    Catch::Contains("seq_len: must be in [1, 16]"));
  CHECK_THROWS_WITH(model.forward(batch.tokens.data(), batch.targets.data(), 0, kT),
                    Catch::Contains("batch: must be at least 1, got 0"));
}
