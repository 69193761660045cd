// Stage 00's memory, measured by the tracker, against the formulas of docs/stages/00-naive.md:
// 4 + 4 + 8 bytes per parameter, and the exact activation bytes.
#include <catch2/catch.hpp>

#include "activation_formula.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"

using namespace scalelab;

TEST_CASE("stage 00 bytes by category equal the formulas", "[graded][memory00]") {
  const GPTConfig c = gpt_config_by_name("tiny");
  const std::size_t V = c.vocab_size, Tm = c.max_seq_len, C = c.channels, L = c.num_layers;
  // nanoGPT's shapes: wte V*C, wpe T*C, per block 12 C^2 + 13 C (ln 2x2C, c_attn 3C^2+3C,
  // attn c_proj C^2+C, c_fc 4C^2+4C, mlp c_proj 4C^2+C), ln_f 2C.
  const std::size_t N = V * C + Tm * C + L * (12 * C * C + 13 * C) + 2 * C;
  constexpr int B = 3, T = 16;
  MemoryTracker tracker;
  GPT model(c, &tracker);
  REQUIRE(model.num_params() == N);
  model.init_weights(1);
  AdamW opt(model.num_params(), AdamWConfig{}, &tracker);
  std::vector<int> x(B * T), y(B * T);
  for (int i = 0; i < B * T; ++i) {
    x[i] = (i * 5) % c.vocab_size;
    y[i] = (i * 3 + 1) % c.vocab_size;
  }
  model.forward(x.data(), y.data(), B, T);
  model.backward();
  opt.step(model.params(), model.grads());
  CHECK(tracker.peak(MemCategory::kParams) == 4 * N);
  CHECK(tracker.peak(MemCategory::kGrads) == 4 * N);
  CHECK(tracker.peak(MemCategory::kOptimizer) == 8 * N);
  const scalelab_test::Shape s{V, C, L, static_cast<std::size_t>(c.num_heads)};
  const std::size_t formula = scalelab_test::act_bytes_none(s, B, T);
  INFO("measured activation peak " << tracker.peak(MemCategory::kActivations) << " bytes, formula " << formula);
  CHECK(tracker.peak(MemCategory::kActivations) == formula);
}
