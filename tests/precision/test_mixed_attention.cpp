// Stages 03 and 08 together: the mixed-precision model with --attention chunked and flash. The
// attention step runs on the fp32 staging like every other layer and its output is rounded to
// half; the lse (B,NH,T) stays fp32 (precision/mixed_block.cpp says why). Checked here: against
// the same mixed model with naive attention, against the fp32 model with the same attention, the
// activation bytes against the formula (naive's half bytes, less NH B T^2 half elements per block
// slot, plus NH B T fp32 ones), segment checkpointing bitwise equal to none, gradient accumulation,
// and a trainer run composing bf16, flash, accumulation and sqrt checkpointing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "activation_formula.hpp"
#include "attention_shape.hpp"
#include "batch.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "precision/mixed_model.hpp"
#include "precision_support.hpp"
#include "tensor_errors.hpp"
#include "train/trainer.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {

const prior::ModelShape kShape = kAttentionShape;  // T = 70 (two tiles, one partial), L = 4
constexpr int kB = kAttentionB, kT = kAttentionT;
const char* const kHalves[] = {"bf16", "fp16"};
const AttentionKind kLseKinds[] = {AttentionKind::kChunked, AttentionKind::kFlash};

struct Run {
  double loss = 0;                        // mean over the micro-batches
  std::vector<float> grads;               // fp32, or the half gradients widened
  std::vector<std::uint16_t> half_grads;  // (half precisions only)
  std::size_t act_peak = 0, block_forwards = 0;
};

// The model of `precision` (make_train_model: Fp32TrainModel or MixedPrecisionModel) after one
// forward and backward of `batch` as `micro` micro-batches of kB / micro rows, each backward
// scaled by 1 / micro, as the trainer accumulates (stage 01). fp16 runs at the loss scale the
// trainer starts it at, 2^16 (GradScaler's), so that its small gradients are not subnormal; the
// gradients come back divided by it.
Run run(const std::string& precision, AttentionKind kind, const std::string& policy, const Batch& batch,
        int micro = 1) {
  const double scale = precision == "fp16" ? 65536.0 : 1.0;
  MemoryTracker tracker;
  const std::unique_ptr<TrainModel> model = make_train_model(config_from(kShape), precision, &tracker);
  model->init_weights(kAttentionSeed);
  model->set_checkpoint_policy(CheckpointPolicy::parse(policy));
  model->set_attention(kind);
  Run r;
  const int rows = kB / micro;
  for (int m = 0; m < micro; ++m) {
    const std::size_t at = static_cast<std::size_t>(m) * rows * kT;
    r.loss += model->forward(batch.tokens.data() + at, batch.targets.data() + at, rows, kT) / micro;
    model->backward(scale / micro);
  }
  if (const auto* mixed = dynamic_cast<const MixedPrecisionModel*>(model.get())) {
    r.grads = mixed->grads_as_float();
    for (float& g : r.grads) g = static_cast<float>(g / scale);
    r.half_grads.assign(mixed->half_grads(), mixed->half_grads() + mixed->num_params());
  } else {
    r.grads.assign(model->fp32_grads(), model->fp32_grads() + model->num_params());
  }
  r.act_peak = tracker.peak(MemCategory::kActivations);
  r.block_forwards = model->block_forward_count();
  return r;
}

std::string describe(const std::string& precision, AttentionKind kind) {
  return "--precision " + precision + " --attention " + attention_kind_name(kind);
}

// Against the same mixed model with naive attention. The two differ in where the probabilities
// are rounded: naive saves P = softmax(s) in half, so its backward reads probabilities rounded by
// up to u (the format's unit roundoff: 2^-9 for bf16, 2^-12 for fp16); chunked and flash recompute
// P in fp32 from half q, k and the fp32 lse, unrounded. (Their fp32 kernels agree with naive's to
// about 1e-6, far below u.) So every gradient differs by the effect of one rounding of P, and of
// the roundings to half that this flips downstream: a few u per tensor in relative norm. Measured
// (B 2, T 70, L 4), the worst tensor: bf16 5.6e-3 = 2.9 u (chunked) and 4.5e-3 (flash), fp16 (loss
// scale 2^16) 7.3e-4 = 3.0 u (both); two micro-batches with sqrt 5.8e-3, 4.9e-3 and 6.8e-4. For
// scale, the mixed model's own worst tensor against fp32 is 1.4e-2 (bf16) and 1.2e-3 (fp16).
// Tolerance 6 u per tensor. The loss (forward only: a few flipped roundings of
// the attention output) within u relative; measured 0 (bf16) and 4.6e-7 (fp16).
constexpr double kVsNaiveTolBF16 = 6.0 / 512, kVsNaiveTolFP16 = 6.0 / 4096;
constexpr double kLossTolBF16 = 1.0 / 512, kLossTolFP16 = 1.0 / 4096;

}  // namespace

TEST_CASE("mixed precision with chunked and flash attention gives the loss and gradients of naive",
          "[mixed_attention]") {
  const Batch batch = random_batch(kShape.V, kB, kT, 5);
  const ParamLayout layout(config_from(kShape));
  for (const char* f : kHalves) {
    const Run naive = run(f, AttentionKind::kNaive, "none", batch);
    const bool bf16 = std::string(f) == "bf16";
    const double tol = bf16 ? kVsNaiveTolBF16 : kVsNaiveTolFP16, loss_tol = bf16 ? kLossTolBF16 : kLossTolFP16;
    for (AttentionKind kind : kLseKinds) {
      const Run r = run(f, kind, "none", batch);
      const std::string what = describe(f, kind);
      std::string report;
      const double worst = worst_tensor_error(what + " gradient vs naive", layout, r.grads.data(), naive.grads.data(),
                                              tol, report);
      const double loss_err = std::fabs(r.loss - naive.loss) / std::fabs(naive.loss);
      INFO(report << what << ": loss " << r.loss << " vs naive " << naive.loss << " (relative difference " << loss_err
                  << ", tolerance " << loss_tol << "); worst per-tensor gradient error " << worst << " (tolerance "
                  << tol << ")");
      CHECK(loss_err <= loss_tol);
      CHECK(report.empty());
    }
  }
}

// The same tolerances as [mixed_vs_fp32] (tests/precision/test_mixed_model.cpp): per element
// |a - b| <= 0.1 |b| + 0.02 max|b| (bf16), 0.02 |b| + 0.005 max|b| (fp16), the loss within 1e-3:
// about 20 roundings of 2^-9 (2^-12) on each gradient's path. Measured: largest error 0.60% of
// max|b| in bf16 and 0.089% in fp16 for both kinds (naive's: 0.77% and 0.089%; chunked and flash
// do not round the probabilities), the loss within 8.1e-6.
TEST_CASE("mixed precision with chunked and flash attention matches the fp32 model with the same attention",
          "[mixed_attention]") {
  const Batch batch = random_batch(kShape.V, kB, kT, 5);
  for (AttentionKind kind : kLseKinds) {
    const Run want = run("fp32", kind, "none", batch);
    const double gmax = max_abs(want.grads);
    for (const char* f : kHalves) {
      const bool bf16 = std::string(f) == "bf16";
      const Run r = run(f, kind, "none", batch);
      INFO(describe(f, kind) << ": loss " << r.loss << " vs fp32 " << want.loss);
      CHECK(std::fabs(r.loss - want.loss) <= 1e-3);
      CHECK_MATCH(compare_close(describe(f, kind) + " gradients vs fp32 " + attention_kind_name(kind), r.grads.data(),
                                want.grads.data(), r.grads.size(), bf16 ? 0.1 : 0.02, (bf16 ? 0.02 : 0.005) * gmax));
    }
  }
}

// The formula written out (activation_formula.hpp's fp32 bytes, halved, then the attention's
// part of each block slot): naive keeps NH B T^2 half elements per slot, chunked and flash NH B T
// fp32 ones. Segment checkpointing repeats the same widen-compute-round on the same half inputs,
// and recomputes the lse in fp32 as forward did: bitwise equal to none.
TEST_CASE("mixed precision with chunked and flash: activation bytes equal the formula, checkpointing is bitwise",
          "[mixed_attention]") {
  const Shape s{static_cast<std::size_t>(kShape.V), static_cast<std::size_t>(kShape.C),
                static_cast<std::size_t>(kShape.L), static_cast<std::size_t>(kShape.NH)};
  const std::size_t B = kB, T = kT, NH = s.NH, L = s.L;
  const Batch batch = random_batch(kShape.V, kB, kT, 5);
  struct Case {
    const char* policy;
    std::size_t slots, fp32_naive_bytes, extra_forwards;
  };
  const Case cases[] = {{"none", L, act_bytes_none(s, B, T), 0},
                        {"every:1", 1, act_bytes_segments(s, B, T, 1), L - 1},
                        {"every:2", 2, act_bytes_segments(s, B, T, 2), L - 2},
                        {"sqrt", 2, act_bytes_segments(s, B, T, 2), L - 2}};
  for (const char* f : kHalves)
    for (AttentionKind kind : kLseKinds) {
      const Run none = run(f, kind, "none", batch);
      for (const Case& c : cases) {
        const Run naive = run(f, AttentionKind::kNaive, c.policy, batch);
        const Run r = c.policy == std::string("none") ? none : run(f, kind, c.policy, batch);
        const std::size_t half_naive = c.fp32_naive_bytes / 2;
        const std::size_t formula = half_naive - c.slots * 2 * NH * B * T * T + c.slots * 4 * NH * B * T;
        INFO(describe(f, kind) << " --checkpoint " << c.policy << ": measured activation peak " << r.act_peak
                               << " B, formula " << formula << " B (naive's " << half_naive << " B measured "
                               << naive.act_peak << " B, less " << c.slots << " slots x 2 x NH B T^2, plus " << c.slots
                               << " slots x 4 x NH B T); " << r.block_forwards << " block forwards");
        CHECK(naive.act_peak == half_naive);
        CHECK(r.act_peak == formula);
        CHECK(r.block_forwards == L + c.extra_forwards);
        CHECK(r.loss == none.loss);
        CHECK_MATCH(compare_bitwise(describe(f, kind) + " --checkpoint " + c.policy + ": half gradients vs none",
                                    r.half_grads.data(), none.half_grads.data(), r.half_grads.size()));
      }
    }
}

// Two micro-batches of one row each, accumulated in half (stage 01 with stage 03's rounding per
// backward call): against naive accumulated the same way, within the tolerances of the first
// test; the peak is one micro-batch's (B / 2 rows), under sqrt checkpointing too.
TEST_CASE("mixed precision with chunked and flash: gradient accumulation and sqrt checkpointing", "[mixed_attention]") {
  const Shape s{static_cast<std::size_t>(kShape.V), static_cast<std::size_t>(kShape.C),
                static_cast<std::size_t>(kShape.L), static_cast<std::size_t>(kShape.NH)};
  const std::size_t rows = kB / 2, T = kT, NH = s.NH;
  const Batch batch = random_batch(kShape.V, kB, kT, 5);
  const ParamLayout layout(config_from(kShape));
  for (const char* f : kHalves) {
    const bool bf16 = std::string(f) == "bf16";
    const double tol = bf16 ? kVsNaiveTolBF16 : kVsNaiveTolFP16, loss_tol = bf16 ? kLossTolBF16 : kLossTolFP16;
    const Run naive = run(f, AttentionKind::kNaive, "sqrt", batch, 2);
    for (AttentionKind kind : kLseKinds) {
      const Run r = run(f, kind, "sqrt", batch, 2);
      const Run plain = run(f, kind, "none", batch, 2);
      const std::string what = describe(f, kind) + " --grad-accum 2 --checkpoint sqrt";
      std::string report;
      const double worst = worst_tensor_error(what + " gradient vs naive", layout, r.grads.data(), naive.grads.data(),
                                              tol, report);
      const std::size_t formula = act_bytes_segments(s, rows, T, 2) / 2 - 2 * 2 * NH * rows * T * T +
                                  2 * 4 * NH * rows * T;
      INFO(report << what << ": loss " << r.loss << " vs naive " << naive.loss << "; worst per-tensor gradient error "
                  << worst << " (tolerance " << tol << "); activation peak " << r.act_peak << " B, formula " << formula
                  << " B (B/2 rows, one segment of 2 blocks)");
      CHECK(std::fabs(r.loss - naive.loss) / std::fabs(naive.loss) <= loss_tol);
      CHECK(report.empty());
      CHECK(r.act_peak == formula);
      CHECK_MATCH(compare_bitwise(what + ": half gradients vs --checkpoint none", r.half_grads.data(),
                                  plain.half_grads.data(), r.half_grads.size()));
    }
  }
}

TEST_CASE("mixed precision refuses selective checkpointing with chunked and flash, in either order",
          "[mixed_attention]") {
  const auto config_error = [](auto f) {
    try {
      f();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no ConfigError thrown)");
  };
  for (const char* f : kHalves)
    for (AttentionKind kind : kLseKinds) {
      MemoryTracker tracker;
      const auto a = make_train_model(config_from(kShape), f, &tracker);
      const auto b = make_train_model(config_from(kShape), f, &tracker);
      a->set_attention(kind);
      b->set_checkpoint_policy(CheckpointPolicy::parse("selective"));
      const std::string messages[] = {
          config_error([&] { a->set_checkpoint_policy(CheckpointPolicy::parse("selective")); }),
          config_error([&] { b->set_attention(kind); }),
      };
      for (const std::string& m : messages)
        CHECK_THAT(m, Catch::Contains("checkpoint: --checkpoint selective") &&
                          Catch::Contains(std::string("--attention ") + attention_kind_name(kind)) &&
                          Catch::Contains("use --checkpoint every:K or sqrt, or --attention naive"));
      CHECK_NOTHROW(b->set_attention(AttentionKind::kNaive));
    }
}

// The trainer composes them: bf16 and fp16 (with its loss scaler), flash and chunked, 2
// micro-batches, sqrt checkpointing, on the tiny config at T = 70 (shape override). 20 steps of
// the generated arithmetic text against the same runs with naive attention and with fp32 and the
// same attention: the per-step loss within stage 03's curve tolerances (1e-2 bf16, 1e-3 fp16), and
// the activation peak equal to the formula at B / 2 rows. Measured, the largest gap over the 20
// steps: bf16 1.1e-4 (flash) and 1.3e-4 (chunked) to naive, 1.4e-3 and 1.2e-3 to fp32; fp16 2.1e-5
// and 1.6e-5 to naive, 7.3e-5 and 6.9e-5 to fp32; the loss falls from 4.14 to 3.29.
TEST_CASE("the trainer runs bf16 and fp16 with flash and chunked, accumulation and sqrt checkpointing",
          "[mixed_attention]") {
  const ArithmeticText text;
  constexpr int kSteps = 20, kBatch = 4;
  auto options = [&](const char* precision, const char* attention) {
    TrainOptions o;
    o.config = "tiny";
    o.shape.max_seq_len = kT;
    o.seq_len = kT;
    o.steps = kSteps;
    o.batch = kBatch;
    o.seed = 1337;
    o.data = text.path();
    o.grad_accum = 2;
    o.checkpoint = CheckpointPolicy::parse("sqrt");  // tiny has L = 2: segments of 1 block
    o.precision = precision;
    o.attention = attention;
    return o;
  };
  struct Curve {
    std::vector<double> losses;
    std::size_t act_peak = 0, skipped = 0;
  };
  auto train = [&](const TrainOptions& o) {
    MemoryTracker tracker;
    Trainer trainer(o, &tracker);
    Curve c;
    for (int i = 0; i < kSteps; ++i) {
      const StepStats s = trainer.step();
      c.losses.push_back(s.loss);
      c.skipped += s.skipped;
    }
    c.act_peak = tracker.peak(MemCategory::kActivations);
    return c;
  };
  auto max_diff = [](const Curve& a, const Curve& b) {
    double worst = 0;
    for (std::size_t i = 0; i < a.losses.size(); ++i) worst = std::max(worst, std::fabs(a.losses[i] - b.losses[i]));
    return worst;
  };
  const Shape s{64, 32, 2, 4};
  const std::size_t rows = kBatch / 2, T = kT, NH = s.NH;
  for (const char* precision : {"bf16", "fp16"}) {
    const double tol = std::string(precision) == "bf16" ? 1e-2 : 1e-3;
    const Curve naive = train(options(precision, "naive"));
    for (const char* attention : {"flash", "chunked"}) {
      const Curve fp32 = train(options("fp32", attention));
      const Curve c = train(options(precision, attention));
      const std::size_t formula = act_bytes_segments(s, rows, T, 1) / 2 - 2 * NH * rows * T * T + 4 * NH * rows * T;
      INFO("--precision " << precision << " --attention " << attention
                          << " --grad-accum 2 --checkpoint sqrt: max |loss - naive's| " << max_diff(c, naive)
                          << ", max |loss - fp32's| " << max_diff(c, fp32) << " (tolerance " << tol << "); loss "
                          << c.losses.front() << " -> " << c.losses.back() << "; " << c.skipped
                          << " steps skipped; activation peak " << c.act_peak << " B, formula " << formula << " B");
      CHECK(max_diff(c, naive) <= tol);
      CHECK(max_diff(c, fp32) <= tol);
      CHECK(c.skipped == 0);
      CHECK(c.losses.back() < c.losses.front() - 0.5);  // it trains
      CHECK(c.act_peak == formula);
    }
  }
}
