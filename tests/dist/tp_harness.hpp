// What the tensor-parallel tests share: a TensorParallelStrategy driven as the trainer drives it
// (strategy_harness.hpp), and a rank's shard gathered back into whole tensors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "dist/gather_weights.hpp"
#include "dist/tp_mixed_model.hpp"
#include "dist/tp_model.hpp"
#include "dist/tp_strategy.hpp"
#include "strategy_harness.hpp"

namespace scalelab_test {

struct TpHarness : StrategyHarness {
  std::unique_ptr<scalelab::TensorParallelStrategy> strategy;

  // tp ranks x (world / tp) replicas, m micro-batches of batch / (dp m) rows; in `precision`
  // (fp32, or bf16/fp16: mixed precision, the loss multiplied by `scale`), with --zero `zero`.
  // With `device` the shard runs its --device cuda path with that chunk (host_copy_tp_chunk.hpp:
  // a CPU twin).
  TpHarness(scalelab::Communicator& world, const scalelab::GPTConfig& config, int tp, bool sequence_parallel, int m,
            int batch, int seq_len, std::uint64_t seed,
            const scalelab::CheckpointPolicy& policy = scalelab::CheckpointPolicy{},
            const std::string& precision = "fp32", double scale = 1.0, int zero = 0,
            scalelab::DeviceTpChunkFactory device = {}) {
    if (device) options.device = "cuda";  // the shard's device path, with `device`'s chunk
    options.precision = precision;
    options.parallel.zero = zero;
    loss_scale = scale;
    options.batch = batch;
    options.seq_len = seq_len;
    options.parallel.tp = tp;
    options.parallel.sequence_parallel = sequence_parallel;
    options.parallel.micro_batches = m;
    options.adamw.lr = 1e-3;
    strategy = std::make_unique<scalelab::TensorParallelStrategy>(world, options, std::move(device));
    start(*strategy, config, seed, policy, "tensor-parallel test");
  }
  scalelab::TpShardModel& any_shard() { return strategy->shard_model(); }
  // The shard as its precision's class.
  scalelab::TensorParallelModel& shard() { return dynamic_cast<scalelab::TensorParallelModel&>(any_shard()); }
  scalelab::MixedTensorParallelModel& mixed_shard() {
    return dynamic_cast<scalelab::MixedTensorParallelModel&>(any_shard());
  }
  scalelab::Communicator& tp() { return strategy->grid().tp(); }

  // Every tp rank's `local` (laid out like its shard) assembled by the library's gather
  // (dist/gather_weights.hpp) into the whole model's values in ParamLayout(config) order, then
  // given to every rank of the group.
  std::vector<float> gather_whole(const float* local) {
    const scalelab::TpLayout& mine = any_shard().shard();
    std::vector<float> whole = scalelab::gather_whole_model(tp(), mine.config(), mine.held(local),
                                                            "tensor-parallel test");
    whole.resize(mine.whole().num_params());
    tp().broadcast(whole.data(), whole.size(), 0);
    return whole;
  }
};

}  // namespace scalelab_test
