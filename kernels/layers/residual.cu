// Residual add and its backward, one thread per element (grid-stride).
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/residual.hpp"

namespace scalelab::cuda {

namespace {

template <typename F>
__global__ void residual_forward_kernel(F* out, const F* a, const F* b, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = from_float<F>(to_float(a[i]) + to_float(b[i]));
}

template <typename F>
__global__ void residual_backward_kernel(F* da, F* db, const F* dout, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float d = to_float(dout[i]);
    da[i] = from_float<F>(to_float(da[i]) + d);
    db[i] = from_float<F>(to_float(db[i]) + d);
  }
}

}  // namespace

template <typename F>
void residual_forward(F* out, const F* a, const F* b, std::size_t N, cudaStream_t stream) {
  if (N == 0) return;
  residual_forward_kernel<<<blocks_for(N), kThreads, 0, stream>>>(out, a, b, N);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void residual_backward(F* da, F* db, const F* dout, std::size_t N, cudaStream_t stream) {
  if (N == 0) return;
  residual_backward_kernel<<<blocks_for(N), kThreads, 0, stream>>>(da, db, dout, N);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

#define SCALELAB_INSTANTIATE(F)                                                         \
  template void residual_forward<F>(F*, const F*, const F*, std::size_t, cudaStream_t); \
  template void residual_backward<F>(F*, F*, const F*, std::size_t, cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
