// The whole model (GPTModel<double>): d mean loss / d parameter against central finite
// differences, for a sample of elements of every tensor, with and without checkpointing.
#include <catch2/catch.hpp>

#include "gradcheck.hpp"
#include "model/gpt.hpp"

using namespace scalelab;
using namespace scalelab_test;

TEST_CASE("the model's backward matches finite differences for every tensor", "[graded][fd_model]") {
  const GPTConfig c = gpt_config_of_shape(/*V=*/11, /*T=*/6, /*C=*/8, /*L=*/2, /*NH=*/2, "fd");
  constexpr int B = 2, T = 5;
  const std::vector<int> tokens = {1, 4, 4, 9, 0, 10, 2, 7, 7, 3}, targets = {4, 4, 9, 0, 10, 2, 7, 7, 3, 1};
  for (const char* policy : {"none", "every"}) {
    INFO("checkpoint policy " << policy);
    GPTModel<double> model(c, nullptr);
    model.init_weights(3);
    // GPT-2 init makes biases zero and LayerNorm weights one; perturb them so every term counts.
    Rng rng(4);
    for (std::size_t i = 0; i < model.num_params(); ++i) model.params()[i] += 0.05 * rng.normal();
    model.set_checkpoint_policy(CheckpointPolicy::parse(policy));
    // Parameter gradients accumulate (+=): start from non-zero values and check what the
    // backward added (one that overwrote a gradient would pass from zero).
    Rng grad_rng(5);
    for (std::size_t i = 0; i < model.num_params(); ++i) model.grads()[i] = 0.01 * grad_rng.normal();
    const std::vector<double> before(model.grads(), model.grads() + model.num_params());
    model.forward(tokens.data(), targets.data(), B, T);
    model.backward();
    std::vector<double> grads(model.grads(), model.grads() + model.num_params());
    for (std::size_t i = 0; i < grads.size(); ++i) grads[i] -= before[i];
    for (const auto& t : model.layout().tensors()) {
      double scale = 1e-3;
      for (std::size_t i = 0; i < t.numel; ++i) scale = std::max(scale, std::fabs(grads[t.offset + i]));
      for (int s = 0; s < 5; ++s) {
        const std::size_t j = t.offset + (s * 7919u) % t.numel;
        const double saved = model.params()[j], h = 1e-6;
        model.params()[j] = saved + h;
        const double up = model.forward(tokens.data(), targets.data(), B, T);
        model.params()[j] = saved - h;
        const double down = model.forward(tokens.data(), targets.data(), B, T);
        model.params()[j] = saved;
        const double numeric = (up - down) / (2 * h);
        INFO(t.name << "[" << j - t.offset << "]: backward " << grads[j] << ", finite difference " << numeric);
        CHECK(std::fabs(grads[j] - numeric) <= 1e-6 * scale);
      }
    }
  }
}
