// AdamW on the GPU; twin of AdamW::update_range (optim/adamw.hpp), with PyTorch's semantics.
// The scalar factors (bias corrections, decay) are computed on the host in double and rounded
// once, exactly as the CPU does, and the kernel does the per-element float arithmetic in the
// CPU's order with explicitly rounded operations (no fused multiply-add): on the same inputs
// the GPU update is bitwise equal to the CPU's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "optim/adamw.hpp"

namespace scalelab::cuda {

// The per-step constants of the update, rounded to float as the CPU rounds them.
struct AdamWScalars {
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float decay;      // 1 - lr * weight_decay
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
};
// t is the step count after begin_step() (1 for the first update).
AdamWScalars adamw_scalars(const AdamWConfig& config, long t, double lr);

// fp32 training: params, m, v (count) updated in place from grads (count).
void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t count, const AdamWScalars& k,
                  cudaStream_t stream);

// Mixed precision (stage 03): fp32 master weights, m and v; half-precision gradients, which
// are multiplied by grad_scale first (1/loss_scale, times a clipping factor); afterwards the
// half-precision model parameters get the new master weights rounded to nearest even.
// H: bf16 or fp16. master, m, v (count) fp32; params, grads (count) H.
template <typename H>
void adamw_update_mixed(H* params, float* master, const H* grads, float* m, float* v, std::size_t count,
                        float grad_scale, const AdamWScalars& k, cudaStream_t stream);

}  // namespace scalelab::cuda
