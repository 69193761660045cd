// The kernels of gradient scaling and the two-pass sum of squares (launched by grad_ops.cu;
// tests/simt/ runs them on the CPU). Both stream the whole gradient buffer once,
// so their speed is the memory's: each thread moves 16 bytes per access (8 bf16/fp16 or 4 fp32
// values, one 128-bit load), since 2-byte accesses leave most of each memory transaction unused.
// A buffer that does not start on a 16-byte boundary has a short scalar head (and any buffer a
// scalar tail); the middle is all 16-byte accesses.
#pragma once

#include <cstddef>

#include "kernels/core/dtype.cuh"

namespace scalelab::cuda::grad_ops_kernels {

template <typename F>
__device__ __forceinline__ F scaled(F x, float factor) {
  return from_float<F>(__fmul_rn(to_float(x), factor));  // as the CPU's g[i] *= s
}

// x (n) *= factor. Grid-stride over the packs; the first threads also take the head and tail.
template <typename F>
__global__ void scale_kernel(F* x, float factor, std::size_t n, std::size_t head, std::size_t packs,
                             std::size_t tail_begin) {
  const std::size_t tid = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  F* body = x + head;
  for (std::size_t i = tid; i < packs; i += stride) {
    Pack16<F> p = load_pack(body + i * Pack16<F>::kSize);
#pragma unroll
    for (int k = 0; k < Pack16<F>::kSize; ++k) p.v[k] = scaled(p.v[k], factor);
    store_pack(body + i * Pack16<F>::kSize, p);
  }
  if (tid < head) x[tid] = scaled(x[tid], factor);
  if (tail_begin + tid < n) x[tail_begin + tid] = scaled(x[tail_begin + tid], factor);
}

// Packs each thread has in flight per loop iteration: one 16-byte load at a time leaves the
// memory idle while the thread waits on it; four independent ones keep it busy.
constexpr int kSumUnroll = 4;

// partials[block] = this block's share of sum x[i]^2, in double (each square of an fp32 value
// is exact in double). The summation order depends only on n and x's alignment, so a given
// buffer gives the same sum on every run.
template <typename F>
__global__ void sum_squares_partial_kernel(double* partials, const F* x, std::size_t n, std::size_t head,
                                           std::size_t packs, std::size_t tail_begin) {
  __shared__ double shared[32];
  constexpr int kSize = Pack16<F>::kSize;
  const std::size_t tid = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const F* body = x + head;
  double sum = 0.0;
  for (std::size_t i0 = tid; i0 < packs; i0 += kSumUnroll * stride) {
    Pack16<F> p[kSumUnroll];
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u) {  // all the loads first, then the arithmetic
      const std::size_t i = i0 + u * stride;
      if (i < packs) p[u] = load_pack(body + i * kSize);
    }
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u) {
      if (i0 + u * stride >= packs) break;
#pragma unroll
      for (int k = 0; k < kSize; ++k) {
        const double xi = to_float(p[u].v[k]);
        sum += xi * xi;
      }
    }
  }
  if (tid < head) {
    const double xi = to_float(x[tid]);
    sum += xi * xi;
  }
  if (tail_begin + tid < n) {
    const double xi = to_float(x[tail_begin + tid]);
    sum += xi * xi;
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void sum_partials_kernel(double* out, const double* partials, int count) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) *out = sum;
}

}  // namespace scalelab::cuda::grad_ops_kernels
