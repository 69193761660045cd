// What the mixed-precision model-parallel tests share (stage 03 with 05 and 06): the whole
// mixed-precision model (stage 03) trained on the same batch with m micro-batches accumulated
// (stage 01), and the check of master weights after a few AdamW steps against it.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "batch.hpp"
#include "compare.hpp"
#include "optim/adamw.hpp"
#include "precision/mixed_model.hpp"
#include "train/accumulate.hpp"

namespace scalelab_test {

// u: half the gap between 1 and the next value, 2^-8 (bf16) or 2^-11 (fp16).
inline double unit_roundoff(scalelab::HalfFormat f) {
  return f == scalelab::HalfFormat::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}
// fp16 trains with a loss scale (stage 03's scaler); bf16 without.
inline double loss_scale_of(scalelab::HalfFormat f) { return f == scalelab::HalfFormat::kFP16 ? 1024.0 : 1.0; }

struct MixedWhole {
  double first_loss = 0;
  std::vector<float> first_grads;  // widened half gradients, still times the loss scale
  std::vector<float> master_after;
};

// The whole mixed-precision model from `seed`: m micro-batches of the batch (B rows of T)
// accumulated with the loss times `scale`, then the step, `steps` times.
inline MixedWhole run_mixed_whole(const scalelab::GPTConfig& config, scalelab::HalfFormat f, std::uint64_t seed,
                                  const Batch& batch, int B, int T, int m, double scale,
                                  const scalelab::AdamWConfig& adamw, int steps = 3) {
  scalelab::MemoryTracker tracker;
  scalelab::MixedPrecisionModel model(config, f, &tracker);
  model.init_weights(seed);
  scalelab::AdamW optimizer(model.num_params(), adamw, &tracker);
  MixedWhole w;
  for (int step = 0; step < steps; ++step) {
    model.zero_grad();
    const double loss = scalelab::accumulate_gradients(model, batch.tokens.data(), batch.targets.data(), B, T, m,
                                                       scale);
    if (step == 0) {
      w.first_loss = loss;
      w.first_grads = model.grads_as_float();
    }
    model.optimizer_step(optimizer, adamw.lr, 1.0 / scale, 0.0);
  }
  w.master_after.assign(model.master_params(), model.master_params() + model.num_params());
  return w;
}

// The bounds on the master weights after 3 steps against the whole model's: the relative norm of
// the difference per tensor, for biases and for the rest.
struct MasterBounds {
  double weights = 2e-2;
  double biases = 2e-2;
};

// Master weights of tensor `name` (numel values) after 3 steps against the whole model's, by the
// relative norm of the difference (bounds): AdamW's m / sqrt(v) turns even a tiny gradient
// difference into one of up to lr where the gradient itself is tiny, and biases start at zero,
// so their norm after 3 steps is a few lr and each flipped update weighs much.
// attn.c_attn.bias's key third [C, 2C) has an exact gradient of zero (softmax ignores a constant
// added to every score): in half its gradient is rounding noise, and AdamW steps about lr on
// noise of any size, in either direction. Those values are only bounded: 3 steps of at most ~lr
// each, on both sides, 6 lr. Its query and value thirds are compared as every bias.
inline void check_master_after(const std::string& name, const float* got, const float* want, std::size_t numel, int C,
                               double lr, const MasterBounds& bounds = {}) {
  if (name.ends_with("attn.c_attn.bias")) {
    double worst = 0;
    for (int i = C; i < 2 * C; ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    INFO("master weights after 3 steps, the key bias of " << name << ": max difference " << worst);
    CHECK(worst <= 2 * 3 * lr);
    const double q = relative_norm_error(got, want, C);
    const double v = relative_norm_error(got + 2 * C, want + 2 * C, C);
    INFO("master weights after 3 steps, the query and value bias of " << name << ": relative norm errors " << q << ", "
                                                                      << v);
    CHECK(std::max(q, v) <= bounds.biases);
    return;
  }
  const double err = relative_norm_error(got, want, numel);
  INFO("master weights after 3 steps, " << name << ": relative norm error " << err);
  CHECK(err <= (name.ends_with(".bias") ? bounds.biases : bounds.weights));
}

}  // namespace scalelab_test
