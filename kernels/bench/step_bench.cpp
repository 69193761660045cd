// The training-step benchmark: a fresh GPU model per variant, warm-up, then timed steps.
#include "kernels/bench/step_bench.hpp"

#include <algorithm>
#include <memory>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/rng.hpp"
#include "core/stats.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/device_memory.hpp"
#include "kernels/model/gpu_train_model.hpp"
#include "optim/adamw.hpp"

namespace scalelab::cuda {

std::string variant_precision(const std::string& variant) {
  return variant_has_flash(variant) ? variant.substr(0, variant.size() - kFlashSuffix.size()) : variant;
}

bool variant_has_flash(const std::string& variant) { return variant.ends_with(kFlashSuffix); }

void StepBenchOptions::validate() const {
  const GPTConfig c = gpt_config_by_name(config);
  require(batch >= 1, "batch", "must be at least 1, got " + std::to_string(batch), "pass e.g. --batch 8");
  require(seq_len >= 0 && seq_len <= c.max_seq_len, "seq",
          "must be in [0, " + std::to_string(c.max_seq_len) + "], got " + std::to_string(seq_len),
          "pass 0 for the config's context");
  require(warmup >= 0 && steps >= 1, "steps", "need steps >= 1 and warmup >= 0", "pass e.g. --steps 10");
  require(!variants.empty(), "precision", "no variant to run", "pass fp32, tf32, bf16 or all");
  for (const std::string& v : variants) {
    const std::string base = variant_precision(v);
    require(base == "fp32" || base == "tf32" || base == "bf16", "precision", "unknown variant '" + v + "'",
            "use fp32, tf32 or bf16, each optionally with +flash, or all");
  }
  require(peak_tflops >= 0, "peak_tflops", "must be non-negative", "pass the measured bf16 GEMM TFLOP/s, or 0");
}

double step_flops_per_token(const GPTConfig& c, std::size_t num_params, int T) {
  return 6.0 * static_cast<double>(num_params) + 12.0 * c.num_layers * c.channels * T;
}

namespace {

// F: the storage type (float for fp32 and tf32, bf16 for mixed precision).
template <typename F>
StepBenchRow bench_variant(const StepBenchOptions& o, const std::string& variant) {
  const GPTConfig config = gpt_config_by_name(o.config);
  const int B = o.batch, T = o.seq_len > 0 ? o.seq_len : config.max_seq_len;
  MemoryTracker tracker;
  const DeviceMemoryProbe probe;  // created with the tracker: both start level
  GpuOptions gpu;
  gpu.allow_tf32 = variant_precision(variant) == "tf32";
  auto model = std::make_unique<GpuTrainModel<F>>(config, &tracker, gpu);
  model->set_attention(variant_has_flash(variant) ? AttentionKind::kFlash : AttentionKind::kNaive);
  model->init_weights(1337);
  AdamW optimizer(model->num_params(), AdamWConfig{.lr = 3e-4}, nullptr);  // m, v live on the device

  Rng rng(42);
  std::vector<int> tokens(static_cast<std::size_t>(B) * T), targets(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int>(rng.below(config.vocab_size));
    targets[i] = static_cast<int>(rng.below(config.vocab_size));
  }
  cudaStream_t stream = model->stream();
  StepBenchRow row;
  row.variant = variant;
  row.B = B;
  row.T = T;
  row.num_params = model->num_params();
  Event start, stop;
  std::vector<double> ms;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    start.record(stream);
    model->zero_grad();
    row.final_loss = model->forward(tokens.data(), targets.data(), B, T);
    model->backward(1.0);
    model->optimizer_step(optimizer, optimizer.config().lr, 1.0, 1.0);
    stop.record(stream);
    stop.synchronize();
    if (i >= o.warmup) ms.push_back(elapsed_ms(start, stop));
  }
  row.median_ms = median(ms);
  row.min_ms = *std::min_element(ms.begin(), ms.end());
  row.max_ms = *std::max_element(ms.begin(), ms.end());
  row.tokens_per_s = static_cast<double>(B) * T / (row.median_ms * 1e-3);
  row.flops_per_token = step_flops_per_token(config, row.num_params, T);
  row.tflops = row.tokens_per_s * row.flops_per_token / 1e12;
  row.mfu = o.peak_tflops > 0 ? row.tflops / o.peak_tflops : 0;
  row.tracked_peak_bytes = tracker.peak_total();
  row.device_peak_bytes = probe.check(tracker, 0).device_peak;
  return row;
}

}  // namespace

std::vector<StepBenchRow> run_step_bench(const StepBenchOptions& options) {
  options.validate();
  std::vector<StepBenchRow> rows;
  for (const std::string& v : options.variants)
    rows.push_back(variant_precision(v) == "bf16" ? bench_variant<bf16>(options, v) : bench_variant<float>(options, v));
  return rows;
}

}  // namespace scalelab::cuda
