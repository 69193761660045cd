// The planner's closed forms against what the stages build: parameters per rank against the
// layouts (model/params.hpp slices for pipeline ranks, dist/tp_layout.hpp for tensor-parallel
// ranks), activations against model/gpt.hpp's count (which stage 00 and 02's tests check against
// the memory tracker), model states against ZeRO's (dist/zero_shards.hpp), traffic against the
// ring's exact counts that stage 07's test measures; bf16 with every attention kind against the
// mixed-precision model's memory tracker. All exact (integers).
#include <catch2/catch.hpp>

#include "batch.hpp"
#include "comm/partition.hpp"
#include "dist/pipeline_stage_model.hpp"
#include "dist/tp_layout.hpp"
#include "dist/zero_shards.hpp"
#include "model/gpt.hpp"
#include "model/params.hpp"
#include "optim/adamw.hpp"
#include "plan/plan_memory.hpp"
#include "plan/plan_model.hpp"
#include "plan/plan_time.hpp"
#include "plan/plan_traffic.hpp"
#include "precision/mixed_model.hpp"

using namespace scalelab;

namespace {
// Shapes that exercise uneven pipeline splits and a vocabulary that t does not divide.
std::vector<GPTConfig> shapes() {
  return {gpt_config_by_name("tiny"), gpt_config_by_name("mini"), gpt_config_of_shape(257, 16, 24, 5, 6),
          plan_model_by_name("gpt2-124m").config};
}
}  // namespace

TEST_CASE("parameters per pipeline rank equal the pipeline stage's layout", "[plan]") {
  for (const GPTConfig& c : shapes())
    for (int pp = 1; pp <= std::min(4, c.num_layers); ++pp)
      for (int s = 0; s < pp; ++s) {
        const std::size_t layout = ParamLayout(c, pipeline_stage_slice(c, s, pp)).num_params();
        INFO(c.name << ", pipeline rank " << s << " of " << pp << ": layout " << layout << ", planner "
                    << rank_params(c, 1, pp, s));
        CHECK(rank_params(c, 1, pp, s) == layout);
      }
}

TEST_CASE("parameters per tensor-parallel rank equal the tensor-parallel layout", "[plan]") {
  for (const GPTConfig& c : shapes())
    for (int t : {1, 2, 3, 4}) {
      if (c.num_heads % t != 0) continue;
      for (int r = 0; r < t; ++r) {
        const std::size_t layout = TpLayout(c, t, r).layout().num_params();
        INFO(c.name << ", tensor-parallel rank " << r << " of " << t << ": layout " << layout << ", planner "
                    << rank_params(c, t, 1, 0));
        CHECK(rank_params(c, t, 1, 0) == layout);
      }
    }
}

TEST_CASE("activations per micro-batch equal the model's count for every policy and pipeline rank", "[plan]") {
  for (const GPTConfig& c : shapes())
    for (const char* policy : {"none", "every:2", "sqrt", "selective"})
      for (int pp = 1; pp <= std::min(3, c.num_layers); ++pp)
        for (int b : {1, 3}) {
          PlanLayout l;
          l.pp = pp;
          l.micro_batches = pp;  // any schedule that runs
          l.micro_rows = b;
          l.checkpoint = CheckpointPolicy::parse(policy);
          l.precision = "fp32";
          for (int s = 0; s < pp; ++s) {
            const std::size_t model = activation_elements(c, b, c.max_seq_len, l.checkpoint,
                                                          pipeline_stage_slice(c, s, pp));
            INFO(c.name << ", " << policy << ", pipeline rank " << s << " of " << pp << ", b " << b << ": model "
                        << model << ", planner " << plan_activation_elements(c, l, s));
            CHECK(plan_activation_elements(c, l, s) == model);
          }
        }
}

TEST_CASE("model states under ZeRO equal stage 07's formulas, fp32, every stage and d = 1..5", "[plan]") {
  const std::size_t psi = ParamLayout(gpt_config_by_name("mini")).num_params();
  for (int d = 1; d <= 5; ++d)
    for (int zero = 0; zero <= 3; ++zero) {
      const std::size_t shard = BlockPartition{psi, d}.size(0);
      const ZeroStateBytes want = zero_state_bytes(zero, psi, shard);
      const PlanMemory got = model_state_memory(state_bytes("fp32"), zero, psi, d);
      INFO("d " << d << ", stage " << zero << ": planner " << got.params << "/" << got.grads << "/" << got.optimizer
                << ", stage 07 " << want.params << "/" << want.grads << "/" << want.optimizer);
      CHECK(got.params == static_cast<double>(want.params));
      CHECK(got.grads == static_cast<double>(want.grads));
      CHECK(got.optimizer == static_cast<double>(want.optimizer));
    }
}

TEST_CASE("data-parallel bytes equal the ring's exact counts that stage 07 measures", "[plan]") {
  const GPTConfig c = gpt_config_by_name("mini");
  const std::size_t psi = ParamLayout(c).num_params();
  Cluster cluster = cluster_preset("h100-sxm");
  for (int d = 1; d <= 4; ++d)
    for (int m : {1, 2})
      for (int zero = 0; zero <= 3; ++zero) {
        const BlockPartition p{psi, d};
        const double rs = d > 1 ? static_cast<double>(psi - p.size(0)) : 0;
        const double ag = d > 1 ? static_cast<double>(psi - p.size(1 % d)) : 0;
        // tests/dist/test_zero.cpp [zero_traffic]; DDP's single-bucket all-reduce is rs + ag.
        const double want = zero <= 1 ? rs + ag : zero == 2 ? m * rs + ag : m * (rs + 2 * ag);
        PlanLayout l;
        l.dp = d;
        l.zero = zero;
        l.micro_batches = m;
        l.precision = "fp32";
        const PlanTraffic t = plan_traffic(c, l, cluster, 0);
        INFO("d " << d << ", m " << m << ", stage " << zero << ": planner " << t.dp_bytes << " bytes, ring "
                  << 4 * want);
        CHECK(t.dp_bytes == 4 * want);
      }
}

TEST_CASE("tensor-parallel bytes follow stage 06's ledger: 4 all-reduces of N C per block and micro-batch", "[plan]") {
  const GPTConfig c = gpt_config_by_name("mini");
  const Cluster cluster = cluster_preset("h100-sxm");
  for (int t : {2, 4}) {
    PlanLayout l;
    l.tp = t;
    l.micro_rows = 3;
    l.micro_batches = 2;
    l.precision = "fp32";
    const double N = 3.0 * c.max_seq_len, ring = 2.0 * (t - 1) / t;
    // per micro-batch: 4L + 2 all-reduces of N C (blocks, embedding, ln_f) and 3 of N (cross-entropy)
    const double want = 2 * 4 * ring * ((4.0 * c.num_layers + 2) * N * c.channels + 3 * N);
    CHECK(plan_traffic(c, l, cluster, 0).tp_bytes == Approx(want).epsilon(1e-12));
  }
}

TEST_CASE("chunked and flash attention save B NH T per block where naive saves B NH T^2 (stage 08)", "[plan]") {
  for (const GPTConfig& c : shapes())
    for (int t : {1, 2}) {
      if (c.num_heads % t != 0) continue;
      PlanLayout naive;
      naive.tp = t;
      naive.micro_rows = 3;
      PlanLayout flash = naive;
      flash.attention = AttentionKind::kFlash;
      const std::size_t heads = static_cast<std::size_t>(c.num_heads / t), T = static_cast<std::size_t>(c.max_seq_len);
      const std::size_t per_block = heads * 3 * T * T - heads * 3 * T;
      INFO(c.name << ", t " << t);
      CHECK(plan_activation_elements(c, naive, 0) - plan_activation_elements(c, flash, 0) ==
            static_cast<std::size_t>(c.num_layers) * per_block);
    }
}

// Stages 03 and 08 together: the planner's bf16 bytes per rank against a bf16 run of the
// mixed-precision model (one micro-batch of b rows; the model, its AdamW state and its saved
// activations as the tracker counts them). The lse of chunked and flash is fp32 in the model
// (precision/mixed_block.cpp), so the planner counts it at 4 bytes (StateBytes::lse) and the rest
// of the activations at 2: naive's half bytes less 2 NH b T^2 and plus 4 NH b T per block slot.
TEST_CASE("bf16 with chunked and flash attention: the planner's bytes equal the mixed model's tracker", "[plan]") {
  const GPTConfig c = gpt_config_of_shape(64, 70, 32, 4, 4, "plan-mixed");  // T 70: two 64-key tiles
  for (const AttentionKind kind : {AttentionKind::kNaive, AttentionKind::kChunked, AttentionKind::kFlash})
    for (const char* policy : {"none", "every:1", "sqrt", "selective"})
      for (int b : {1, 3}) {
        if (kind != AttentionKind::kNaive && std::string(policy) == "selective") continue;  // refused
        PlanLayout l;
        l.micro_rows = b;
        l.micro_batches = 2;  // accumulation: the peak is one micro-batch's
        l.checkpoint = CheckpointPolicy::parse(policy);
        l.attention = kind;
        l.precision = "bf16";
        const PlanMemory want = plan_memory(c, l, 0);
        MemoryTracker tracker;
        MixedPrecisionModel model(c, HalfFormat::kBF16, &tracker);
        AdamW adamw(model.num_params(), AdamWConfig{}, &tracker);
        model.init_weights(3);
        model.set_checkpoint_policy(l.checkpoint);
        model.set_attention(kind);
        const scalelab_test::Batch batch = scalelab_test::random_batch(c.vocab_size, b, c.max_seq_len, 4);
        model.forward(batch.tokens.data(), batch.targets.data(), b, c.max_seq_len);
        model.backward(1.0);
        INFO("bf16 --attention " << attention_kind_name(kind) << " --checkpoint " << policy << ", b " << b
                                 << ": measured params/grads/optimizer/activations "
                                 << tracker.peak(MemCategory::kParams) << "/" << tracker.peak(MemCategory::kGrads)
                                 << "/" << tracker.peak(MemCategory::kOptimizer) << "/"
                                 << tracker.peak(MemCategory::kActivations) << " bytes, planner " << want.params << "/"
                                 << want.grads << "/" << want.optimizer << "/" << want.activations);
        CHECK(static_cast<double>(tracker.peak(MemCategory::kParams)) == want.params);
        CHECK(static_cast<double>(tracker.peak(MemCategory::kGrads)) == want.grads);
        CHECK(static_cast<double>(tracker.peak(MemCategory::kOptimizer)) == want.optimizer);
        CHECK(static_cast<double>(tracker.peak(MemCategory::kActivations)) == want.activations);
      }
}

TEST_CASE("h200-measured: the planner gives back the bf16 GPT-2 step it was calibrated on", "[plan]") {
  // docs/results/gpu-nvidia-h200.md, one H200: GPT-2 124M, B 8, T 1024, bf16, naive attention,
  // 35.93 ms per step (227,973 tokens/s, 24.6% of the 797.4 TFLOP/s bf16 GEMM measured in the same
  // run). The preset's peak and efficiency are those two numbers, so with the planner's FLOPs
  // (6 psi + 12 L C T per token, the step benchmark's) one GPU's step comes back within rounding.
  const GPTConfig c = gpt_config_by_name("gpt2");
  PlanLayout l;
  l.micro_rows = 8;
  l.precision = "bf16";
  const Cluster cluster = cluster_preset("h200-measured");
  const PlanTime t = plan_time(c, l, cluster, plan_traffic(c, l, cluster, 0));
  INFO("planned " << t.step_s * 1e3 << " ms, measured 35.93 ms");
  CHECK(t.step_s == Approx(35.93e-3).epsilon(0.005));
  CHECK(t.mfu == Approx(0.246).epsilon(0.005));
}
