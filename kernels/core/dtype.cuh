// Device-side helpers shared by the kernels (included only by .cu files): loads and stores that
// convert between the storage type and fp32 (round-to-nearest-even), warp and block reductions,
// launch arithmetic, and the list of element types every templated launcher is built for.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

#include "kernels/core/dtype.hpp"

namespace scalelab::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(fp16 x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ fp16 from_float<fp16>(float x) {
  return __float2half_rn(x);
}

// Sum / max over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum / max over a whole block (blockDim.x a multiple of 32, at most 1024); every thread gets
// the result. `shared` holds 32 values. They contain __syncthreads: call them from all threads.
template <typename V>
__device__ __forceinline__ V block_sum(V v, V* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read by a previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? shared[lane] : V(0));
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? shared[lane] : -INFINITY);
}

// *p += v with one atomic read-modify-write (the half types round the sum to half).
__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(bf16* p, float v) { atomicAdd(p, __float2bfloat16_rn(v)); }
__device__ __forceinline__ void atomic_add(fp16* p, float v) { atomicAdd(p, __float2half_rn(v)); }

// kSize consecutive values of F, loaded or stored with one access of sizeof(F) * kSize bytes:
// aligned so, 16 bytes become one 128-bit load or store, where 2-byte accesses would leave most
// of each memory transaction unused. kSize = 1 is the same code with scalar accesses.
template <typename F, int N>
struct alignas(sizeof(F) * N) Pack {
  static constexpr int kSize = N;
  F v[N];
};
// 16 bytes of F: 4 fp32 or 8 bf16/fp16 values.
template <typename F>
using Pack16 = Pack<F, 16 / sizeof(F)>;

constexpr int kThreads = 256;  // block size of the elementwise kernels

inline unsigned int blocks_for(std::size_t n, int threads = kThreads) {
  // Grid-stride loops cover the rest, so the grid may be capped.
  const std::size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned int>(blocks < (1u << 20) ? blocks : (1u << 20));
}

}  // namespace scalelab::cuda

// Explicit instantiation of a launcher for every storage type.
#define SCALELAB_FOR_EACH_DTYPE(X) \
  X(float)                         \
  X(::scalelab::cuda::bf16)        \
  X(::scalelab::cuda::fp16)
