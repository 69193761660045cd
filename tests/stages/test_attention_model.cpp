// Stage 08, the model with --attention chunked and flash, against the naive attention of stage 00
// (the same GPTModel with its default). The memory-efficient kernels compute the same softmax in
// another order (online, per chunk or tile), so loss and gradients agree within a stated
// tolerance, not bitwise; each block's saved attention falls from B*NH*T*T to B*NH*T; and the
// segment checkpoint policies, which only repeat block forwards, stay bitwise equal to no
// checkpointing with the new kinds too.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "activation_formula.hpp"
#include "attention_shape.hpp"
#include "batch.hpp"
#include "comm/local_communicator.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "dist/tp_model.hpp"
#include "model/attention_block.hpp"
#include "model/gpt.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/attention_chunked.hpp"
#include "model/layers/attention_flash.hpp"
#include "optim/adamw.hpp"
#include "tensor_errors.hpp"
#include "train/fp32_model.hpp"
#include "train/train_options.hpp"
#include "train/trainer.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {

// T = 70, L = 4 (attention_shape.hpp says why).
const prior::ModelShape kShape = kAttentionShape;
constexpr int kB = kAttentionB, kT = kAttentionT;
constexpr std::uint64_t kSeed = kAttentionSeed;
constexpr int kSteps = 3;

// Measured worst per-tensor relative norm errors against naive (B=2, T=70): float gradients
// 4.6e-7 (flash) and 4.1e-7 (chunked), parameters after 3 AdamW steps 4.3e-6 and 2.8e-6 (AdamW
// divides by sqrt(v), which amplifies the difference of small gradients), the float loss equal;
// double gradients 8.8e-16. The bounds leave a margin of about 10x; a wrong softmax, mask or lse
// gives errors of order 1 in the gradients and about 0.1 in the parameters.
constexpr double kFloatGradTol = 5e-6;
constexpr double kFloatParamTol = 5e-5;
constexpr double kFloatLossTol = 1e-6;  // relative
constexpr double kDoubleTol = 1e-12;

const AttentionKind kLseKinds[] = {AttentionKind::kChunked, AttentionKind::kFlash};

template <typename F>
struct Run {
  double loss = 0;
  std::vector<F> grads;       // after the first forward and backward
  std::vector<float> params;  // after kSteps AdamW steps (float only)
  std::size_t act_peak = 0;   // the tracker's activations peak
  std::size_t block_forwards = 0;
};

template <typename F>
Run<F> run(AttentionKind kind, const std::string& policy, const Batch& batch, int steps) {
  MemoryTracker tracker;
  GPTModel<F> model(config_from(kShape), &tracker);
  model.init_weights(kSeed);
  model.set_checkpoint_policy(CheckpointPolicy::parse(policy));
  model.set_attention(kind);
  Run<F> r;
  r.loss = static_cast<double>(model.forward(batch.tokens.data(), batch.targets.data(), kB, kT));
  model.backward();
  r.grads.assign(model.grads(), model.grads() + model.num_params());
  if constexpr (std::is_same_v<F, float>) {
    AdamW adamw(model.num_params(), AdamWConfig{.lr = 1e-3}, &tracker);
    for (int s = 0; s < steps; ++s) {
      if (s > 0) {
        model.zero_grad();
        model.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
        model.backward();
      }
      adamw.step(model.params(), model.grads());
    }
    r.params.assign(model.params(), model.params() + model.num_params());
  }
  r.act_peak = tracker.peak(MemCategory::kActivations);
  r.block_forwards = model.block_forward_count();
  return r;
}

// The largest |gradient| of the key bias thirds relative to the largest |gradient| of the model.
double key_bias_gradient_ratio(const ParamLayout& layout, const std::vector<float>& grads) {
  const std::size_t C = static_cast<std::size_t>(kShape.C);
  double key = 0, all = 0;
  for (float g : grads) all = std::max(all, static_cast<double>(std::fabs(g)));
  for (const auto& t : layout.tensors())
    if (t.name.find("attn.c_attn.bias") != std::string::npos)
      for (std::size_t i = C; i < 2 * C; ++i) key = std::max(key, static_cast<double>(std::fabs(grads[t.offset + i])));
  return key / all;
}

// Stage 08 formulas (docs: 16 BTC + 4 BT + NH B T per block with chunked or flash), written out
// here independently of the library, next to activation_formula.hpp's for naive.
std::size_t lse_block_elements(const Shape& s, std::size_t B, std::size_t T) {
  return 16 * B * T * s.C + 4 * B * T + s.NH * B * T;
}
std::size_t lse_act_bytes_none(const Shape& s, std::size_t B, std::size_t T) {
  return 4 * (head_elements(s, B, T) + s.L * lse_block_elements(s, B, T));
}
std::size_t lse_act_bytes_segments(const Shape& s, std::size_t B, std::size_t T, std::size_t k) {
  const std::size_t segments = (s.L + k - 1) / k;
  return 4 * (head_elements(s, B, T) + (segments - 1) * B * T * s.C + B * T * s.C + k * lse_block_elements(s, B, T));
}

// The message of the ConfigError that f throws, or a line saying it threw none.
template <typename Fn>
std::string config_error(Fn f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError thrown)";
}

// The float run's loss, gradients and parameters after kSteps AdamW steps with `kind`, and the
// double run's loss and gradients, against the same runs with naive attention.
void check_against_naive(AttentionKind kind) {
  const Batch batch = random_batch(kShape.V, kB, kT, 5);
  const ParamLayout layout(config_from(kShape));
  const std::string name = attention_kind_name(kind);
  {
    const Run<float> naive = run<float>(AttentionKind::kNaive, "none", batch, kSteps);
    const Run<float> r = run<float>(kind, "none", batch, kSteps);
    const double loss_err = std::fabs(r.loss - naive.loss) / std::fabs(naive.loss);
    INFO("--attention " << name << ": loss " << r.loss << " vs naive " << naive.loss << ", relative error " << loss_err
                        << " (tolerance " << kFloatLossTol << ")");
    CHECK(loss_err <= kFloatLossTol);
    std::string report;
    const double g = worst_tensor_error(name + " gradient", layout, r.grads.data(), naive.grads.data(), kFloatGradTol,
                                        report);
    const double p = worst_tensor_error(name + " parameters after " + std::to_string(kSteps) + " AdamW steps", layout,
                                        r.params.data(), naive.params.data(), kFloatParamTol, report, true);
    // What the key-bias thirds left out above hold: noise, in both runs.
    const double key_noise = std::max(key_bias_gradient_ratio(layout, r.grads),
                                      key_bias_gradient_ratio(layout, naive.grads));
    INFO("largest key-bias gradient / largest gradient: " << key_noise << " (bound 1e-8)");
    CHECK(key_noise <= 1e-8);
    INFO(report << name << ": worst gradient error " << g << " (tolerance " << kFloatGradTol
                << "), worst parameter error " << p << " (tolerance " << kFloatParamTol << ")");
    CHECK(report.empty());
  }
  const Run<double> naive = run<double>(AttentionKind::kNaive, "none", batch, 0);
  const Run<double> r = run<double>(kind, "none", batch, 0);
  const double loss_err = std::fabs(r.loss - naive.loss) / std::fabs(naive.loss);
  std::string report;
  const double g = worst_tensor_error(name + " gradient", layout, r.grads.data(), naive.grads.data(), kDoubleTol,
                                      report);
  INFO(report << name << " double: loss rel err " << loss_err << ", worst gradient error " << g << " (tolerance "
              << kDoubleTol << ")");
  CHECK(loss_err <= kDoubleTol);
  CHECK(report.empty());
}

}  // namespace

// Graded in lab 08 (tests/grading/lab08-attention.json): chunked runs the student's forward with
// the reference's backward, flash the reference's forward with the student's backward.
TEST_CASE("--attention chunked gives naive's loss, gradients and updates (float and double)",
          "[graded][attention_model_chunked]") {
  check_against_naive(AttentionKind::kChunked);
}

TEST_CASE("--attention flash gives naive's loss, gradients and updates (float and double)",
          "[graded][attention_model_flash]") {
  check_against_naive(AttentionKind::kFlash);
}

TEST_CASE("activation bytes equal the formula for each attention kind; the attention part falls to B*NH*T",
          "[graded][attention_memory]") {
  const Shape s{static_cast<std::size_t>(kShape.V), static_cast<std::size_t>(kShape.C),
                static_cast<std::size_t>(kShape.L), static_cast<std::size_t>(kShape.NH)};
  const Batch batch = random_batch(kShape.V, kB, kT, 5);
  const std::size_t B = kB, T = kT, L = s.L, NH = s.NH;
  // none keeps L blocks, sqrt (round(sqrt(4)) = 2) one segment of 2.
  struct Case {
    const char* policy;
    std::size_t blocks_kept, naive_bytes, lse_bytes;
  };
  const Case cases[] = {
      {"none", L, act_bytes_none(s, B, T), lse_act_bytes_none(s, B, T)},
      {"sqrt", 2, act_bytes_segments(s, B, T, 2), lse_act_bytes_segments(s, B, T, 2)},
      {"every:1", 1, act_bytes_segments(s, B, T, 1), lse_act_bytes_segments(s, B, T, 1)},
  };
  for (const Case& c : cases) {
    const Run<float> naive = run<float>(AttentionKind::kNaive, c.policy, batch, 0);
    INFO("--checkpoint " << c.policy << " --attention naive: measured " << naive.act_peak << " bytes, formula "
                         << c.naive_bytes);
    CHECK(naive.act_peak == c.naive_bytes);
    for (const AttentionKind kind : kLseKinds) {
      const Run<float> r = run<float>(kind, c.policy, batch, 0);
      INFO("--checkpoint " << c.policy << " --attention " << attention_kind_name(kind) << ": measured " << r.act_peak
                           << " bytes, formula " << c.lse_bytes);
      CHECK(r.act_peak == c.lse_bytes);
      // Exactly the attention's part of each kept block changed: 4 (NH B T T - NH B T) bytes.
      const std::size_t saved = c.blocks_kept * 4 * (NH * B * T * T - NH * B * T);
      INFO("naive - " << attention_kind_name(kind) << " = " << naive.act_peak - r.act_peak << " bytes, expected "
                      << saved << " (" << c.blocks_kept << " blocks x 4 x (NH B T T - NH B T))");
      CHECK(naive.act_peak - r.act_peak == saved);
    }
  }
}

TEST_CASE("every:2 and sqrt checkpointing with chunked and flash give the gradients of no checkpointing bitwise",
          "[attention_model]") {
  const Batch batch = random_batch(kShape.V, kB, kT, 5);
  for (const AttentionKind kind : kLseKinds) {
    const Run<float> plain = run<float>(kind, "none", batch, 0);
    for (const char* policy : {"every:2", "sqrt"}) {
      const Run<float> r = run<float>(kind, policy, batch, 0);
      INFO("--attention " << attention_kind_name(kind) << " --checkpoint " << policy << ": loss " << r.loss << " vs "
                          << plain.loss << " without checkpointing");
      CHECK(r.loss == plain.loss);
      CHECK_MATCH(compare_bitwise(std::string("gradients with --checkpoint ") + policy + " vs none", r.grads.data(),
                                  plain.grads.data(), r.grads.size()));
      // The first of the two segments was recomputed: L + 2 block forwards.
      CHECK(r.block_forwards == static_cast<std::size_t>(kShape.L + 2));
    }
  }
}

TEST_CASE("a model's attention kind can change between forwards", "[attention_model]") {
  // The activation and scratch buffers follow the kind (they differ in size), so one model
  // switched from naive to flash and back gives what fresh models give.
  const Batch batch = random_batch(kShape.V, kB, kT, 5);
  MemoryTracker tracker;
  GPT model(config_from(kShape), &tracker);
  model.init_weights(kSeed);
  const float naive = model.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
  model.set_attention(AttentionKind::kFlash);
  const float flash = model.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
  model.backward();
  std::vector<float> grads(model.grads(), model.grads() + model.num_params());
  const Run<float> fresh = run<float>(AttentionKind::kFlash, "none", batch, 0);
  CHECK(flash == static_cast<float>(fresh.loss));
  CHECK_MATCH(compare_bitwise("switched model's flash gradients vs a fresh flash model", grads.data(),
                              fresh.grads.data(), grads.size()));
  model.set_attention(AttentionKind::kNaive);
  CHECK(model.forward(batch.tokens.data(), batch.targets.data(), kB, kT) == naive);
}

TEST_CASE("attention settings that cannot run are refused naming the setting and the fix", "[attention_model]") {
  const GPTConfig config = config_from(kShape);
  SECTION("--attention bogus") {
    TrainOptions o;
    o.attention = "bogus";
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--attention") && Catch::Contains("'bogus'") &&
                                        Catch::Contains("use naive, chunked or flash"));
  }
  SECTION("--checkpoint selective with chunked or flash, in the options and in the model, either order") {
    for (const char* kind : {"chunked", "flash"}) {
      TrainOptions o;
      o.attention = kind;
      o.checkpoint = CheckpointPolicy::parse("selective");
      MemoryTracker tracker;
      GPT a(config, &tracker);
      a.set_attention(parse_attention_kind(kind));
      GPT b(config, &tracker);
      b.set_checkpoint_policy(CheckpointPolicy::parse("selective"));
      const std::string messages[] = {
          config_error([&] { o.validate(); }),
          config_error([&] { a.set_checkpoint_policy(CheckpointPolicy::parse("selective")); }),
          config_error([&] { b.set_attention(parse_attention_kind(kind)); }),
      };
      for (const std::string& m : messages)
        CHECK_THAT(m, Catch::Contains("checkpoint: --checkpoint selective") &&
                          Catch::Contains(std::string("--attention ") + kind) &&
                          Catch::Contains("use --checkpoint every:K or sqrt, or --attention naive"));
    }
  }
  SECTION("--attention chunked/flash --precision bf16 (and fp16): runs, and refuses selective checkpointing") {
    // The numbers: tests/precision/test_mixed_attention.cpp.
    for (const char* precision : {"bf16", "fp16"}) {
      MemoryTracker tracker;
      const auto model = make_train_model(config, precision, &tracker);
      for (const AttentionKind kind : {AttentionKind::kNaive, AttentionKind::kChunked, AttentionKind::kFlash})
        CHECK_NOTHROW(model->set_attention(kind));
      CHECK_THROWS_WITH(model->set_checkpoint_policy(CheckpointPolicy::parse("selective")),
                        Catch::Contains("checkpoint: --checkpoint selective") &&
                            Catch::Contains("--attention flash never stores"));
    }
  }
  SECTION("--attention chunked/flash --tp: runs, and refuses selective checkpointing as the GPT does") {
    // The numbers: tests/dist/test_attention_dist.cpp, on 2 tensor-parallel ranks.
    LocalCommunicator tp;
    MemoryTracker tracker;
    TensorParallelModel model(config, tp, false, &tracker);
    for (const AttentionKind kind : {AttentionKind::kNaive, AttentionKind::kChunked, AttentionKind::kFlash})
      CHECK_NOTHROW(model.set_attention(kind));
    CHECK_THROWS_WITH(model.set_checkpoint_policy(CheckpointPolicy::parse("selective")),
                      Catch::Contains("checkpoint: --checkpoint selective") && Catch::Contains("--attention flash"));
  }
  SECTION("the fp32 model through the trainer's interface runs all three") {
    MemoryTracker tracker;
    const auto model = make_train_model(config, "fp32", &tracker);
    for (const AttentionKind kind : {AttentionKind::kNaive, AttentionKind::kChunked, AttentionKind::kFlash})
      CHECK_NOTHROW(model->set_attention(kind));
  }
}

TEST_CASE("each kind's blocks run its own kernel and save what it says", "[attention_model]") {
  // The comparisons above would pass if flash ran the chunked kernel (both equal naive within the
  // tolerance): here block 0's saved lse and attention output must be, bit for bit, what the
  // kind's kernel gives on the block's saved qkv, and naive must keep att and no lse.
  const Batch batch = random_batch(kShape.V, kB, kT, 5);
  const int C = kShape.C, NH = kShape.NH;
  const std::size_t BTC = static_cast<std::size_t>(kB) * kT * C, lse_n = static_cast<std::size_t>(kB) * NH * kT;
  for (const AttentionKind kind : {AttentionKind::kNaive, AttentionKind::kChunked, AttentionKind::kFlash}) {
    MemoryTracker tracker;
    GPT model(config_from(kShape), &tracker);
    model.init_weights(kSeed);
    model.set_attention(kind);
    model.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
    const BlockActs<float>& a = model.acts().blocks[0];
    INFO("--attention " << attention_kind_name(kind));
    std::vector<float> out(BTC), lse(lse_n), att(static_cast<std::size_t>(kB) * NH * kT * kT);
    if (kind == AttentionKind::kNaive) {
      REQUIRE(a.att != nullptr);
      CHECK(a.lse == nullptr);
      attention_forward(out.data(), att.data(), a.qkv, kB, kT, C, NH);
      CHECK_MATCH(compare_bitwise("naive block's att vs attention_forward", a.att, att.data(), att.size()));
    } else {
      CHECK(a.att == nullptr);
      REQUIRE(a.lse != nullptr);
      std::vector<float> scratch(attention_scratch_elements(kind, kT));
      if (kind == AttentionKind::kChunked)
        attention_chunked_forward(out.data(), lse.data(), scratch.data(), a.qkv, kB, kT, C, NH, kAttentionChunk);
      else
        attention_flash_forward(out.data(), lse.data(), scratch.data(), a.qkv, kB, kT, C, NH);
      CHECK_MATCH(compare_bitwise("block's lse vs its kernel's", a.lse, lse.data(), lse_n));
    }
    CHECK_MATCH(compare_bitwise("block's attention output vs its kernel's", a.atty, out.data(), BTC));
  }
}

TEST_CASE("changing the attention kind between a forward and its backward is caught", "[attention_model]") {
  const Batch batch = random_batch(kShape.V, kB, kT, 5);
  MemoryTracker tracker;
  GPT model(config_from(kShape), &tracker);
  model.init_weights(kSeed);
  model.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
  model.set_attention(AttentionKind::kFlash);  // the saved activations hold att, not lse
  CHECK_THROWS_WITH(model.backward(), Catch::Contains("set_attention(flash) between a forward with naive attention "
                                                      "and its backward"));
}
