// The AdamW kernels. __fmul_rn/__fadd_rn/... are IEEE operations that the compiler may not fuse
// into FMAs (it would otherwise: nvcc contracts a*b+c by default), and sqrt and division are
// the correctly rounded ones: together that reproduces the CPU's float arithmetic bit for bit.
#include <cmath>

#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/optim/adamw.hpp"

namespace scalelab::cuda {

namespace {

// One element's update; returns the new parameter. Same operations, same order as the CPU.
__device__ __forceinline__ float adamw_element(float p, float g, float& m, float& v, const AdamWScalars& k) {
  p = __fmul_rn(p, k.decay);  // decoupled weight decay
  m = __fadd_rn(__fmul_rn(m, k.beta1), __fmul_rn(g, k.one_minus_beta1));
  v = __fadd_rn(__fmul_rn(v, k.beta2), __fmul_rn(__fmul_rn(g, g), k.one_minus_beta2));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), k.bc2_sqrt), k.eps);
  return __fsub_rn(p, __fmul_rn(k.step_size, __fdiv_rn(m, denom)));
}

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, std::size_t n, AdamWScalars k) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    float mi = m[i], vi = v[i];
    params[i] = adamw_element(params[i], grads[i], mi, vi, k);
    m[i] = mi;
    v[i] = vi;
  }
}

template <typename H>
__global__ void adamw_mixed_kernel(H* params, float* master, const H* grads, float* m, float* v, std::size_t n,
                                   float grad_scale, AdamWScalars k) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float g = __fmul_rn(to_float(grads[i]), grad_scale);
    float mi = m[i], vi = v[i];
    const float p = adamw_element(master[i], g, mi, vi, k);
    master[i] = p;
    m[i] = mi;
    v[i] = vi;
    params[i] = from_float<H>(p);
  }
}

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t count, const AdamWScalars& k,
                  cudaStream_t stream) {
  if (count == 0) return;
  adamw_kernel<<<blocks_for(count), kThreads, 0, stream>>>(params, grads, m, v, count, k);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename H>
void adamw_update_mixed(H* params, float* master, const H* grads, float* m, float* v, std::size_t count,
                        float grad_scale, const AdamWScalars& k, cudaStream_t stream) {
  if (count == 0) return;
  adamw_mixed_kernel<<<blocks_for(count), kThreads, 0, stream>>>(params, master, grads, m, v, count, grad_scale, k);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template void adamw_update_mixed<bf16>(bf16*, float*, const bf16*, float*, float*, std::size_t, float,
                                       const AdamWScalars&, cudaStream_t);
template void adamw_update_mixed<fp16>(fp16*, float*, const fp16*, float*, float*, std::size_t, float,
                                       const AdamWScalars&, cudaStream_t);

}  // namespace scalelab::cuda
