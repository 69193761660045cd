// GELU forward and backward, one thread per element (grid-stride), fp32 arithmetic.
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/gelu.hpp"

namespace scalelab::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2 / pi)

template <typename F>
__global__ void gelu_forward_kernel(F* out, const F* inp, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float x = to_float(inp[i]);
    const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
    out[i] = from_float<F>(0.5f * x * (1.0f + tanhf(u)));
  }
}

template <typename F>
__global__ void gelu_backward_kernel(F* dinp, const F* dout, const F* inp, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float x = to_float(inp[i]);
    const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
    const float th = tanhf(u);
    const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du_dx;
    dinp[i] = from_float<F>(grad * to_float(dout[i]));  // dout[i] is read before dinp[i] is written
  }
}

}  // namespace

template <typename F>
void gelu_forward(F* out, const F* inp, std::size_t N, cudaStream_t stream) {
  if (N == 0) return;
  gelu_forward_kernel<<<blocks_for(N), kThreads, 0, stream>>>(out, inp, N);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void gelu_backward(F* dinp, const F* dout, const F* inp, std::size_t N, cudaStream_t stream) {
  if (N == 0) return;
  gelu_backward_kernel<<<blocks_for(N), kThreads, 0, stream>>>(dinp, dout, inp, N);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

#define SCALELAB_INSTANTIATE(F)                                           \
  template void gelu_forward<F>(F*, const F*, std::size_t, cudaStream_t); \
  template void gelu_backward<F>(F*, const F*, const F*, std::size_t, cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
