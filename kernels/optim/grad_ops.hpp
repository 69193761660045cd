// What the optimizer step does to the whole gradient buffer on the GPU before AdamW: multiply
// by a factor (1/loss_scale, a clipping coefficient) and measure the global L2 norm (for
// clipping and for the log). Twins: the loops in train/fp32_model.cpp and grad_norm() in
// optim/adamw.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace scalelab::cuda {
// x (N) *= factor, each product rounded to F once. F: float, bf16, fp16.
template <typename F>
void scale_inplace(F* x, float factor, std::size_t N, cudaStream_t stream);

// Blocks of the first pass of sum_squares, i.e. the size of its `partials` scratch.
constexpr int kSumSquaresBlocks = 512;
// *out (device) = sum of x[i]^2 in double. Deterministic: a fixed grid writes kSumSquaresBlocks
// partial sums (scratch `partials`, device memory) that one block then adds in a fixed order.
// The optimizer step's inf/NaN check too: any inf or NaN in x gives an inf or NaN sum (the
// squares are >= 0: no inf - inf), and finite x never overflows it (the largest float squares to
// 1.2e77 in double; 1e9 of those add to 1.2e86, far below double's 1.8e308).
template <typename F>
void sum_squares(double* out, double* partials, const F* x, std::size_t N, cudaStream_t stream);
}  // namespace scalelab::cuda
