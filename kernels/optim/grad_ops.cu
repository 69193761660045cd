// Gradient scaling and the two-pass sum of squares.
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/optim/grad_ops.hpp"

namespace scalelab::cuda {

namespace {

template <typename F>
__global__ void scale_kernel(F* x, float factor, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    x[i] = from_float<F>(__fmul_rn(to_float(x[i]), factor));  // as the CPU's g[i] *= s
}

template <typename F>
__global__ void sum_squares_partial_kernel(double* partials, const F* x, std::size_t n) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const double xi = to_float(x[i]);
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
  scale_kernel<<<blocks_for(N), kThreads, 0, stream>>>(x, factor, N);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void sum_squares(double* out, double* partials, const F* x, std::size_t N, cudaStream_t stream) {
  // Always the full fixed grid (blocks past the end write 0), so the summation order depends
  // only on N, never on timing.
  sum_squares_partial_kernel<<<kSumSquaresBlocks, kThreads, 0, stream>>>(partials, x, N);
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
