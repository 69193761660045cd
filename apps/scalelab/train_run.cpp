// The training loop with reporting.
#include "train_run.hpp"

#include <algorithm>
#include <cstdio>

#include "train/metrics.hpp"

namespace scalelab::cli {

namespace {
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

RunSummary run_training(const TrainOptions& options, const RunOutput& out) {
  MemoryTracker tracker;
  Trainer trainer(options, &tracker);
  MetricsWriter metrics = options.metrics.empty() ? MetricsWriter() : MetricsWriter(options.metrics);
  RunSummary summary;
  summary.num_params = trainer.model().num_params();
  const GPTConfig& c = trainer.model().config();
  if (out.progress)
    std::printf("%sconfig %s (V=%d T=%d C=%d L=%d NH=%d), %zu parameters, batch %d x %d tokens, %s, grad-accum %d, "
                "checkpoint %s\n",
                out.label.c_str(), c.name.c_str(), c.vocab_size, trainer.seq_len(), c.channels, c.num_layers,
                c.num_heads, summary.num_params, options.batch, trainer.seq_len(), options.precision.c_str(),
                options.grad_accum, options.checkpoint.describe().c_str());
  std::vector<double> rates;
  const long first = trainer.steps_done();
  for (int i = 0; i < options.steps; ++i) {
    const StepStats s = trainer.step();
    summary.losses.push_back(s.loss);
    if (i > 0 || options.steps == 1) rates.push_back(s.tokens_per_s);  // the first step allocates
    nlohmann::json rec = {{"step", s.step},       {"loss", s.loss},           {"grad_norm", s.grad_norm},
                          {"ms", s.seconds * 1e3}, {"tokens_per_s", s.tokens_per_s}, {"skipped", s.skipped},
                          {"loss_scale", s.loss_scale}};
    const bool last = i + 1 == options.steps;
    double val = -1;
    if ((options.val_every > 0 && s.step % options.val_every == 0) || last) {
      val = trainer.validation_loss();
      rec["val_loss"] = val;
    }
    nlohmann::json mem;
    for (int k = 0; k < kMemCategoryCount; ++k)
      mem[mem_category_name(static_cast<MemCategory>(k))] = tracker.peak(static_cast<MemCategory>(k));
    rec["peak_bytes"] = mem;
    metrics.write(rec);
    if (out.progress && (i == 0 || last || (s.step - first) % out.log_every == 0)) {
      std::printf("%sstep %5ld/%ld | loss %.4f", out.label.c_str(), s.step, first + options.steps, s.loss);
      if (val >= 0) std::printf(" | val %.4f", val);
      std::printf(" | %7.0f tok/s | %6.1f GFLOP/s | %6.0f ms | peak %.1f MiB%s\n", s.tokens_per_s,
                  s.tokens_per_s * trainer.flops_per_token() / 1e9, s.seconds * 1e3, tracker.peak_total() / 1048576.0,
                  s.skipped ? " | skipped (inf/NaN), scale lowered" : "");
      std::fflush(stdout);
    }
    if (last) summary.final_val_loss = val;
  }
  summary.tokens_per_s = median(rates);
  summary.gflops = summary.tokens_per_s * trainer.flops_per_token() / 1e9;
  for (int k = 0; k < kMemCategoryCount; ++k) summary.peak_bytes[k] = tracker.peak(static_cast<MemCategory>(k));
  summary.block_forwards = trainer.model().block_forward_count();
  const float* p = trainer.model().master_params();
  summary.final_params.assign(p, p + summary.num_params);
  if (out.progress) {
    const double n = static_cast<double>(summary.num_params);
    std::printf("\n%smemory by category after %d steps:\n%s", out.label.c_str(), options.steps, tracker.report().c_str());
    std::printf("bytes per parameter: params %.2f + grads %.2f + optimizer %.2f = %.2f\n",
                tracker.peak(MemCategory::kParams) / n, tracker.peak(MemCategory::kGrads) / n,
                tracker.peak(MemCategory::kOptimizer) / n,
                (tracker.peak(MemCategory::kParams) + tracker.peak(MemCategory::kGrads) +
                 tracker.peak(MemCategory::kOptimizer)) / n);
  }
  if (!options.save_weights.empty()) trainer.save_weights(options.save_weights);
  if (!options.save_checkpoint.empty()) trainer.save_checkpoint(options.save_checkpoint);
  return summary;
}

}  // namespace scalelab::cli
