// Compiled against the reference library (namespace renamed to scalelab_ref when labs are
// selected), whatever student code the test binary links.
#include "prior_stage.hpp"

#include "core/memory.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "train/accumulate.hpp"
#include "train/fp32_model.hpp"
#include "train/trainer.hpp"

namespace prior {

StepResult stage00_step(const ModelShape& s, std::uint64_t seed, const std::vector<int>& tokens,
                        const std::vector<int>& targets, int B, int T) {
  return stage01_step(s, seed, tokens, targets, B, T, 1);
}

StepResult stage01_step(const ModelShape& s, std::uint64_t seed, const std::vector<int>& tokens,
                        const std::vector<int>& targets, int B, int T, int k) {
  const scalelab::GPTConfig c = scalelab::gpt_config_of_shape(s.V, s.T, s.C, s.L, s.NH, "prior");
  scalelab::MemoryTracker tracker;
  scalelab::Fp32TrainModel model(c, &tracker);
  model.init_weights(seed);
  model.zero_grad();
  StepResult r;
  r.loss = scalelab::accumulate_gradients(model, tokens.data(), targets.data(), B, T, k);
  const float* g = model.gpt().grads();
  r.grads.assign(g, g + model.num_params());
  scalelab::AdamWConfig ac;
  ac.lr = 1e-3;
  scalelab::AdamW opt(model.num_params(), ac, &tracker);
  opt.step(model.gpt().params(), model.gpt().grads());
  r.params_after.assign(model.gpt().params(), model.gpt().params() + model.num_params());
  return r;
}

StepsResult stage01_steps(const ModelShape& s, std::uint64_t seed, const std::vector<int>& tokens,
                          const std::vector<int>& targets, int B, int T, int k, int steps) {
  const scalelab::GPTConfig c = scalelab::gpt_config_of_shape(s.V, s.T, s.C, s.L, s.NH, "prior");
  scalelab::MemoryTracker tracker;
  scalelab::Fp32TrainModel model(c, &tracker);
  model.init_weights(seed);
  scalelab::AdamWConfig ac;
  ac.lr = 1e-3;
  scalelab::AdamW opt(model.num_params(), ac, &tracker);
  StepsResult r;
  for (int i = 0; i < steps; ++i) {
    model.zero_grad();
    const double loss = scalelab::accumulate_gradients(model, tokens.data(), targets.data(), B, T, k);
    if (i == 0) {
      r.first_loss = loss;
      r.first_grads.assign(model.gpt().grads(), model.gpt().grads() + model.num_params());
    }
    opt.step(model.gpt().params(), model.gpt().grads());
    if (i == 0) r.params_after_first.assign(model.gpt().params(), model.gpt().params() + model.num_params());
  }
  r.params_after.assign(model.gpt().params(), model.gpt().params() + model.num_params());
  return r;
}

ForwardSnapshot stage00_forward(const ModelShape& s, std::uint64_t seed, const std::vector<int>& tokens,
                                const std::vector<int>& targets, int B, int T) {
  const scalelab::GPTConfig c = scalelab::gpt_config_of_shape(s.V, s.T, s.C, s.L, s.NH, "prior");
  scalelab::MemoryTracker tracker;
  scalelab::GPT model(c, &tracker);
  model.init_weights(seed);
  ForwardSnapshot r;
  r.loss = model.forward(tokens.data(), targets.data(), B, T);
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * s.C;
  const auto& a = model.acts();
  r.encoded.assign(a.encoded, a.encoded + BTC);
  r.ln1.assign(a.blocks[0].ln1, a.blocks[0].ln1 + BTC);
  r.qkv.assign(a.blocks[0].qkv, a.blocks[0].qkv + 3 * BTC);
  r.atty.assign(a.blocks[0].atty, a.blocks[0].atty + BTC);
  r.probs.assign(a.probs, a.probs + BT * s.V);
  return r;
}

RunResult stage00_run(const std::string& config, int steps, int batch, int seq_len, std::uint64_t seed,
                      const std::string& data) {
  scalelab::TrainOptions o;
  o.config = config;
  o.steps = steps;
  o.batch = batch;
  o.seq_len = seq_len;
  o.seed = seed;
  o.data = data;
  scalelab::MemoryTracker tracker;
  scalelab::Trainer trainer(o, &tracker);
  RunResult r;
  for (int i = 0; i < steps; ++i) r.losses.push_back(trainer.step().loss);
  const float* p = trainer.model().master_params();
  r.params.assign(p, p + trainer.model().num_params());
  return r;
}

}  // namespace prior
