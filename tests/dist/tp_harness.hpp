// What the tensor-parallel tests share: a TensorParallelStrategy driven the way the trainer
// drives it (model, optimizer, attach, then zero_grad / begin_step / run / sync / loss / update
// per step) on a batch the test gives, and a rank's shard gathered back into whole tensors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/memory.hpp"
#include "dist/tp_strategy.hpp"
#include "optim/adamw.hpp"
#include "train/train_options.hpp"

namespace scalelab_test {

struct TpHarness {
  scalelab::MemoryTracker tracker;
  scalelab::TrainOptions options;
  std::unique_ptr<scalelab::TensorParallelStrategy> strategy;
  std::unique_ptr<scalelab::TrainModel> model;
  std::unique_ptr<scalelab::AdamW> optimizer;
  int T = 0;

  // tp ranks x (world / tp) replicas, m micro-batches of batch / (dp m) rows.
  TpHarness(scalelab::Communicator& world, const scalelab::GPTConfig& config, int tp, bool sequence_parallel, int m,
            int batch, int seq_len, std::uint64_t seed,
            const scalelab::CheckpointPolicy& policy = scalelab::CheckpointPolicy{})
      : T(seq_len) {
    options.batch = batch;
    options.seq_len = seq_len;
    options.parallel.tp = tp;
    options.parallel.sequence_parallel = sequence_parallel;
    options.parallel.micro_batches = m;
    options.adamw.lr = 1e-3;
    strategy = std::make_unique<scalelab::TensorParallelStrategy>(world, options);
    model = strategy->make_model(config, "fp32", &tracker, {});
    model->set_checkpoint_policy(policy);
    optimizer = std::make_unique<scalelab::AdamW>(model->num_params(), options.adamw, &tracker);
    model->init_weights(seed);
    strategy->attach({*model, *optimizer, options, &tracker, seq_len, "tensor-parallel test"});
  }
  scalelab::TensorParallelModel& shard() { return strategy->shard_model(); }
  scalelab::Communicator& tp() { return strategy->grid().tp(); }

  // Forward and backward of the whole batch and the gradient synchronisation; returns the loss.
  double forward_backward(const std::vector<int>& tokens, const std::vector<int>& targets) {
    model->zero_grad();
    const scalelab::GlobalBatch b{tokens.data(), targets.data(), options.batch, T, options.micro_batches()};
    strategy->begin_step(b);
    const double local = strategy->run_micro_batches(*model, b, 1.0);
    strategy->sync_gradients(*model);
    return strategy->mean_loss(local);
  }
  void update() { strategy->optimizer_step(*model, *optimizer, options.adamw.lr, 1.0, 0.0); }

  // Every tp rank's `local` (this layout) gathered and put together: the whole model's values in
  // ParamLayout(config) order, on every rank of the group.
  std::vector<float> gather_whole(const float* local) {
    const scalelab::TpLayout& mine = shard().shard();
    const std::size_t n = mine.layout().num_params();
    std::vector<float> all(n * static_cast<std::size_t>(tp().size()));
    tp().all_gather(local, all.data(), all.size(), scalelab::DataType::kFloat32);
    std::vector<float> whole(mine.whole().num_params(), 0.0f);
    for (int r = 0; r < tp().size(); ++r)
      scalelab::TpLayout(mine.config(), tp().size(), r)
          .unshard(all.data() + n * static_cast<std::size_t>(r), whole.data());
    return whole;
  }
};

}  // namespace scalelab_test
