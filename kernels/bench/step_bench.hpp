// The training-step benchmark of the GPU GPT (kernels/model): one optimizer step (zero_grad,
// forward, backward, AdamW) timed with CUDA events on the model's stream, after warm-up steps,
// for fp32 (TF32 off and on) and bf16 mixed precision. Reports tokens/s and MFU, with
// docs/design.md's flops per token 6N + 12 L C T (the second term is attention's QK^T and AV,
// forward and backward) over a peak the caller measured (e.g. a large bf16 GEMM's TFLOP/s on
// this device), since a datasheet's peak is not what the device reaches.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "model/config.hpp"

namespace scalelab::cuda {

struct StepBenchOptions {
  std::string config = "gpt2";
  int batch = 8;    // B
  int seq_len = 0;  // T; 0: the config's max_seq_len
  int warmup = 3;   // untimed steps first (allocation, cuBLAS heuristics)
  int steps = 10;   // timed steps; the median is reported
  // fp32: TF32 off; tf32: on; bf16: mixed precision. "+flash" (e.g. "bf16+flash"): the same with
  // flash attention (stage 08) instead of the naive one.
  std::vector<std::string> variants = {"fp32", "tf32", "bf16"};
  double peak_tflops = 0;  // the device's measured peak for MFU; 0 leaves MFU out
  // Throws ConfigError naming the first bad option.
  void validate() const;
};

struct StepBenchRow {
  std::string variant;
  int B = 0, T = 0;
  std::size_t num_params = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double tokens_per_s = 0;
  double flops_per_token = 0;
  double tflops = 0;                   // achieved model TFLOP/s at the median
  double mfu = 0;                      // tflops / peak_tflops (0 without a peak)
  std::size_t tracked_peak_bytes = 0;  // the memory tracker's peak total
  std::size_t device_peak_bytes = 0;   // the device pool's high-water mark over the same run
  double final_loss = 0;
};

inline const std::string kFlashSuffix = "+flash";
// "bf16+flash" -> "bf16"; a variant without the suffix unchanged.
std::string variant_precision(const std::string& variant);
bool variant_has_flash(const std::string& variant);

// 6 N + 12 L C T model flops per token (docs/design.md's convention, as Trainer::flops_per_token).
double step_flops_per_token(const GPTConfig& config, std::size_t num_params, int T);

// Runs every variant in turn on the current device (each with a fresh model).
std::vector<StepBenchRow> run_step_bench(const StepBenchOptions& options);

}  // namespace scalelab::cuda
