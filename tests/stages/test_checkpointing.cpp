// Stage 02, activation checkpointing, against stage 00 from the reference. Recomputing a block
// repeats exactly the same float operations on the same inputs, so the gradients must be
// bitwise equal to stage 00's for every policy.
#include <catch2/catch.hpp>

#include <string>

#include "activation_formula.hpp"
#include "batch.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "model/gpt.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {
const prior::ModelShape kShape{64, 16, 32, 6, 4};  // V, T, C, L = 6 (so segments can be uneven), NH
constexpr int kB = 4, kT = 16;
constexpr std::uint64_t kSeed = 9;
const char* kPolicies[] = {"every", "every:2", "every:4", "every:6", "sqrt", "selective"};

struct Run {
  float loss;
  std::vector<float> grads;
  std::size_t act_peak, block_forwards, attention_recomputes;
};

Run run_policy(const std::string& policy, const Batch& batch) {
  MemoryTracker tracker;
  GPT model(config_from(kShape), &tracker);
  model.init_weights(kSeed);
  model.set_checkpoint_policy(CheckpointPolicy::parse(policy));
  Run r;
  r.loss = model.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
  model.backward();
  r.grads.assign(model.grads(), model.grads() + model.num_params());
  r.act_peak = tracker.peak(MemCategory::kActivations);
  r.block_forwards = model.block_forward_count();
  r.attention_recomputes = model.attention_recompute_count();
  return r;
}
}  // namespace

TEST_CASE("every checkpoint policy gives gradients bitwise equal to stage 00", "[graded][ckpt_equal]") {
  const Batch batch = random_batch(kShape.V, kB, kT, 3);
  const prior::StepResult want = prior::stage00_step(kShape, kSeed, batch.tokens, batch.targets, kB, kT);
  for (const char* policy : kPolicies) {
    INFO("policy " << policy);
    const Run r = run_policy(policy, batch);
    CHECK(static_cast<double>(r.loss) == want.loss);
    CHECK_MATCH(compare_bitwise("gradients vs stage 00", r.grads.data(), want.grads.data(), r.grads.size()));
  }
}

TEST_CASE("peak activation bytes equal the formula of each policy", "[graded][ckpt_memory]") {
  const Shape s{64, 32, 6, 4};
  const Batch batch = random_batch(kShape.V, kB, kT, 3);
  struct Expect {
    const char* policy;
    std::size_t bytes;
  };
  const Expect cases[] = {
      {"none", act_bytes_none(s, kB, kT)},           {"every", act_bytes_segments(s, kB, kT, 1)},
      {"every:2", act_bytes_segments(s, kB, kT, 2)}, {"every:4", act_bytes_segments(s, kB, kT, 4)},
      {"sqrt", act_bytes_segments(s, kB, kT, 2)},  // round(sqrt(6)) = 2
      {"selective", act_bytes_selective(s, kB, kT)},
  };
  for (const auto& c : cases) {
    const Run r = run_policy(c.policy, batch);
    INFO("policy " << c.policy << ": measured " << r.act_peak << " bytes, formula " << c.bytes);
    CHECK(r.act_peak == c.bytes);
  }
  // The point of it all: every segment policy stores less than keeping everything.
  CHECK(act_bytes_segments(s, kB, kT, 2) < act_bytes_none(s, kB, kT));
}

TEST_CASE("recompute costs at most one extra forward", "[graded][ckpt_recompute]") {
  const Batch batch = random_batch(kShape.V, kB, kT, 3);
  const std::size_t L = kShape.L;
  struct Expect {
    const char* policy;
    std::size_t extra;  // L minus the length of the last segment, which is still in memory
  };
  const Expect cases[] = {{"none", 0},    {"every", L - 1}, {"every:2", L - 2}, {"every:4", L - 2},
                          {"every:6", 0}, {"sqrt", L - 2},  {"selective", 0}};
  for (const auto& c : cases) {
    const Run r = run_policy(c.policy, batch);
    INFO("policy " << c.policy << ": " << r.block_forwards << " block forwards for " << L << " layers, expected "
                   << L + c.extra);
    CHECK(r.block_forwards == L + c.extra);
    CHECK(r.block_forwards <= 2 * L);
  }
  const Run sel = run_policy("selective", batch);
  INFO("selective recomputes the attention probabilities of every block but the last");
  CHECK(sel.attention_recomputes == L - 1);
}

TEST_CASE("checkpoint policy strings are parsed or rejected clearly", "[checkpoint_policy]") {
  CHECK(CheckpointPolicy::parse("every:3").every == 3);
  CHECK(CheckpointPolicy::parse("sqrt").segment_blocks(16) == 4);
  CHECK(CheckpointPolicy::parse("every:9").segment_blocks(4) == 4);
  CHECK_THROWS_WITH(CheckpointPolicy::parse("every:0"),
                    Catch::Contains("checkpoint") && Catch::Contains("positive block count"));
  CHECK_THROWS_WITH(CheckpointPolicy::parse("sometimes"),
                    Catch::Contains("unknown policy 'sometimes'") && Catch::Contains("use none, every"));
}
