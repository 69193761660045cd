// Gradient scaling and the two-pass sum of squares. Both stream the whole gradient buffer once,
// so their speed is the memory's: each thread moves 16 bytes per access (8 bf16/fp16 or 4 fp32
// values, one 128-bit load), since 2-byte accesses leave most of each memory transaction unused.
// A buffer that does not start on a 16-byte boundary has a short scalar head (and any buffer a
// scalar tail); the middle is all 16-byte accesses.
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/optim/grad_ops.hpp"

namespace scalelab::cuda {

namespace {

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

}  // namespace

template <typename F>
void scale_inplace(F* x, float factor, std::size_t N, cudaStream_t stream) {
  if (N == 0) return;
  const Split s = split_at_16_bytes(x, N);
  // One pack per thread; at least one block, for the scalar head and tail when there are no packs.
  scale_kernel<<<blocks_for(s.packs > 0 ? s.packs : 1), kThreads, 0, stream>>>(x, factor, N, s.head, s.packs,
                                                                               s.tail_begin);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void sum_squares(double* out, double* partials, const F* x, std::size_t N, cudaStream_t stream) {
  const Split s = split_at_16_bytes(x, N);
  // Always the full fixed grid (blocks past the end write 0), so the summation order depends
  // only on N (and x's alignment), never on timing.
  sum_squares_partial_kernel<<<kSumSquaresBlocks, kThreads, 0, stream>>>(partials, x, N, s.head, s.packs, s.tail_begin);
  SCALELAB_CUDA_LAUNCH_CHECK();
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(out, partials, kSumSquaresBlocks);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

#define SCALELAB_INSTANTIATE(F)                                         \
  template void scale_inplace<F>(F*, float, std::size_t, cudaStream_t); \
  template void sum_squares<F>(double*, double*, const F*, std::size_t, cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
