// What the multi-rank strategy tests share (stages 05, 06 and 07): a ParallelStrategy driven the way
// the trainer drives it (model, optimizer, attach, then zero_grad / begin_step / run / sync /
// loss / update per step) on a batch the test gives. A stage's harness derives from it, fills
// `options` and calls start() with its strategy.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "model/checkpoint_policy.hpp"
#include "model/config.hpp"
#include "model/layers/attention_kind.hpp"
#include "optim/adamw.hpp"
#include "train/parallel_strategy.hpp"
#include "train/train_options.hpp"
#include "train/trainer.hpp"

namespace scalelab_test {

struct StrategyHarness {
  scalelab::MemoryTracker tracker;
  scalelab::TrainOptions options;
  std::unique_ptr<scalelab::TrainModel> model;
  std::unique_ptr<scalelab::AdamW> optimizer;
  int T = 0;
  double loss_scale = 1.0;  // the loss is multiplied by it (fp16's scaler); the step divides it out

  // Builds the strategy's model for `config` (in options.precision, fp32 by default), its
  // optimizer, initialises the weights from `seed` and attaches the strategy, as the trainer does.
  // options.batch, options.seq_len, options.adamw and options.attention are the run's.
  void start(scalelab::ParallelStrategy& strategy, const scalelab::GPTConfig& config, std::uint64_t seed,
             const scalelab::CheckpointPolicy& policy, const std::string& description) {
    strategy_ = &strategy;
    T = options.seq_len;
    model = strategy.make_model(config, options.precision, &tracker, scalelab::make_train_model);
    model->set_checkpoint_policy(policy);
    model->set_attention(scalelab::parse_attention_kind(options.attention));
    optimizer = std::make_unique<scalelab::AdamW>(model->num_params(), options.adamw,
                                                  model->optimizer_tracker(&tracker));
    model->init_weights(seed);
    strategy.attach({*model, *optimizer, options, &tracker, T, description});
  }

  // Forward and backward of the whole batch and the gradient synchronisation; returns the loss.
  double forward_backward(const std::vector<int>& tokens, const std::vector<int>& targets) {
    model->zero_grad();
    const scalelab::GlobalBatch b{tokens.data(), targets.data(), options.batch, T, options.micro_batches()};
    strategy_->begin_step(b);
    const double local = strategy_->run_micro_batches(*model, b, loss_scale);
    strategy_->sync_gradients(*model);
    return strategy_->mean_loss(local);
  }
  void update() { strategy_->optimizer_step(*model, *optimizer, options.adamw.lr, 1.0 / loss_scale, 0.0); }

 private:
  scalelab::ParallelStrategy* strategy_ = nullptr;
};

}  // namespace scalelab_test
