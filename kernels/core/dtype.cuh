// Device-side helpers shared by the kernels (included only by .cu files): loads and stores that
// convert between the storage type and fp32 (round-to-nearest-even), warp and block reductions,
// launch arithmetic, and the list of element types every templated launcher is built for.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/core/dtype.hpp"

namespace scalelab::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
// bf16 is the top half of an fp32, so widening it is a 16-bit shift. Written out rather than
// __bfloat162float, whose inline assembly keeps the compiler from scheduling around it: the bf16
// elementwise and LayerNorm backward kernels took a third more registers with it (same bits).
__device__ __forceinline__ float to_float(bf16 x) {
  return __uint_as_float(static_cast<unsigned>(__bfloat16_as_ushort(x)) << 16);
}
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

// Whether p is on a 16-byte boundary, where a Pack16 may be loaded or stored (host and device).
__host__ __device__ __forceinline__ bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// One 128-bit load or store of a Pack16 (p 16-byte aligned). The store goes through __stwb (a
// plain store, "write back", as `*p = raw` is) because nvcc 13 split some `*p = raw` stores of
// unrolled loops into four 4-byte ones; the intrinsic is always one 16-byte store.
template <typename F>
__device__ __forceinline__ Pack16<F> load_pack(const F* p) {
  const int4 raw = *reinterpret_cast<const int4*>(p);
  Pack16<F> out;
  memcpy(&out, &raw, sizeof raw);
  return out;
}
template <typename F>
__device__ __forceinline__ void store_pack(F* p, const Pack16<F>& in) {
  int4 raw;
  memcpy(&raw, &in, sizeof raw);
  __stwb(reinterpret_cast<int4*>(p), raw);
}

// The split of x (n) into a scalar head [0, head), 16-byte packs [head, head + packs * kSize)
// and a scalar tail after them.
struct Split {
  std::size_t head, packs, tail_begin;
};
template <typename F>
Split split_at_16_bytes(const F* x, std::size_t n) {
  constexpr std::size_t kSize = Pack16<F>::kSize;
  const std::size_t misaligned = reinterpret_cast<std::uintptr_t>(x) % 16;
  // Elements up to the next 16-byte boundary (an F never straddles one: its address is a
  // multiple of sizeof(F), so misaligned is too).
  std::size_t head = misaligned == 0 ? 0 : (16 - misaligned) / sizeof(F);
  if (head > n) head = n;
  const std::size_t packs = (n - head) / kSize;
  return {head, packs, head + packs * kSize};
}

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
