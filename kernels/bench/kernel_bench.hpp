// Every kernel of kernels/ timed forward and backward at the GPT-2 124M shape, as a fraction of
// the device's measured ceilings (ceilings.hpp).
//
// Memory-bound kernels report GB/s over the minimal bytes they must move: each input read once
// and each output written once (an accumulated output, +=, is read and written), whatever the
// kernel actually re-reads. Their ceiling is the copy's GB/s. Matrix products and attention
// report TFLOP/s: 2 m n k per product, attention as the model counts it (4 B T^2 C forward,
// 8 B T^2 C backward: QK^T and AV over the full T x T, which is what the kernels compute). Their
// ceiling is the GEMM of the same element type (fp32 rows: the fp32 GEMM with TF32 off).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bench/ceilings.hpp"

namespace scalelab::cuda {

struct BenchShape {
  // GPT-2 124M. V is the vocabulary (the parameters' size); the LM head and cross-entropy rows
  // run with the logits' rows padded to a multiple of 128 as the model does (gpu_padded_vocab).
  int B = 8, T = 1024, C = 768, NH = 12, V = 50257, L = 12;
  // Parameters of the whole model: V C + T C (embeddings) + L (12 C^2 + 13 C) (blocks) + 2 C (ln_f).
  std::size_t num_params() const;
};

struct KernelRow {
  std::string kernel;  // "layernorm", "matmul fc (C->4C)", ...
  std::string pass;    // "forward" or "backward" (or "update" for the optimizer)
  std::string dtype;   // "fp32", "bf16"
  double median_ms = 0, min_ms = 0;
  double bytes = 0;  // minimal bytes moved (0 for compute-bound rows)
  double flops = 0;  // floating-point operations (0 for memory-bound rows)
  double gbps = 0, tflops = 0;
  double fraction = 0;  // of the ceiling that applies (copy GB/s or the dtype's GEMM TFLOP/s)
};

// Fills in gbps, tflops and fraction from median_ms, bytes and flops.
void finish_row(KernelRow& row, const Ceilings& ceilings);

// Times launches and collects their rows, for one element type on one stream.
class RowRecorder {
 public:
  RowRecorder(const BenchOptions& options, const Ceilings& ceilings, cudaStream_t stream, std::string dtype)
      : options_(options), ceilings_(ceilings), stream_(stream), dtype_(std::move(dtype)) {}
  // A memory-bound launch that must move `bytes`.
  void memory(const std::string& kernel, const std::string& pass, double bytes, const std::function<void()>& launch);
  // A compute-bound launch of `flops` operations.
  void compute(const std::string& kernel, const std::string& pass, double flops, const std::function<void()>& launch);
  std::vector<KernelRow> take() { return std::move(rows_); }

 private:
  void add(const std::string& kernel, const std::string& pass, double bytes, double flops,
           const std::function<void()>& launch);
  const BenchOptions& options_;
  const Ceilings& ceilings_;
  cudaStream_t stream_;
  std::string dtype_;
  std::vector<KernelRow> rows_;
};

// Layers (kernels/layers): encoder, layernorm, matmuls, attention, GELU, residual,
// cross-entropy. F: float or bf16.
template <typename F>
std::vector<KernelRow> bench_layers(const BenchShape& shape, const BenchOptions& options, const Ceilings& ceilings);

// The optimizer step over all num_params() parameters: AdamW (fp32, or mixed precision with bf16
// parameters and gradients), gradient scaling, the sum of squares (also the step's inf/NaN
// check), and for bf16 the fp32 -> bf16 cast.
template <typename F>
std::vector<KernelRow> bench_optimizer(const BenchShape& shape, const BenchOptions& options, const Ceilings& ceilings);

}  // namespace scalelab::cuda
