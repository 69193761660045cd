// What the pipeline tests share: a PipelineStrategy driven the way the trainer drives it (model,
// optimizer, attach, then zero_grad / begin_step / run / sync / loss / update per step) on a
// batch the test gives, and the comparison of a stage's tensors with the whole model's by name.
#pragma once

#include <memory>
#include <string>

#include "compare.hpp"
#include "dist/pipeline_strategy.hpp"
#include "model/params.hpp"
#include "optim/adamw.hpp"

namespace scalelab_test {

struct PipelineHarness {
  scalelab::MemoryTracker tracker;
  scalelab::TrainOptions options;
  std::unique_ptr<scalelab::PipelineStrategy> strategy;
  std::unique_ptr<scalelab::TrainModel> model;
  std::unique_ptr<scalelab::AdamW> optimizer;
  int T = 0;

  // pp ranks x (world / pp) replicas, `schedule` with m micro-batches of batch / (dp m) rows.
  PipelineHarness(scalelab::Communicator& world, const scalelab::GPTConfig& config, int pp, int m,
                  const std::string& schedule, int batch, int seq_len, std::uint64_t seed)
      : T(seq_len) {
    options.batch = batch;
    options.seq_len = seq_len;
    options.parallel.pp = pp;
    options.parallel.micro_batches = m;
    options.parallel.schedule = schedule;
    options.adamw.lr = 1e-3;
    strategy = std::make_unique<scalelab::PipelineStrategy>(world, options);
    model = strategy->make_model(config, "fp32", &tracker, {});
    optimizer = std::make_unique<scalelab::AdamW>(model->num_params(), options.adamw, &tracker);
    model->init_weights(seed);
    strategy->attach({*model, *optimizer, options, &tracker, seq_len, "pipeline test"});
  }
  scalelab::PipelineStageModel& stage() { return strategy->stage(); }

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
};

// Each tensor this stage holds against the same tensor of a whole-model buffer `want` (laid out
// by ParamLayout(config)): bitwise, except the tied wte, within |a - b| <= rtol |b| + atol.
struct TensorMismatch {
  std::string message;
  bool ok = true;
};
inline TensorMismatch compare_stage_tensors(const std::string& what, const scalelab::GPTConfig& config,
                                            const scalelab::ParamLayout& stage_layout, const float* got,
                                            const std::vector<float>& want, double rtol, double atol) {
  const scalelab::ParamLayout whole(config);
  TensorMismatch r;
  for (const auto& t : stage_layout.tensors()) {
    const auto& w = whole.find(t.name);
    const bool tied = t.name == "transformer.wte.weight";
    const Comparison c = tied ? compare_close(what + " " + t.name, got + t.offset, want.data() + w.offset, t.numel,
                                              rtol, atol)
                              : compare_bitwise(what + " " + t.name, got + t.offset, want.data() + w.offset, t.numel);
    if (!c.ok) {
      r.ok = false;
      r.message += c.message() + "\n";
    }
  }
  return r;
}

}  // namespace scalelab_test
