// Embedding lookup (one thread per output element) and its backward.
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/encoder.hpp"

namespace scalelab::cuda {

namespace {

template <typename F>
__global__ void encoder_forward_kernel(F* out, const int* tokens, const F* wte, const F* wpe, int T, int C,
                                       std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t bt = i / C;  // row of out: position b*F + t
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>(bt % T);
    const int token = tokens[bt];
    out[i] = from_float<F>(to_float(wte[std::size_t(token) * C + c]) + to_float(wpe[std::size_t(t) * C + c]));
  }
}

// dwpe[t,c] += sum over b of dout[b,t,c]: one thread per (t,c), the batch summed in order.
template <typename F>
__global__ void encoder_backward_wpe_kernel(F* dwpe, const F* dout, int B, int T, int C) {
  const std::size_t n = std::size_t(T) * C;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int b = 0; b < B; ++b) sum += to_float(dout[std::size_t(b) * n + i]);  // dout[b] starts at b*F*C
    dwpe[i] = from_float<F>(to_float(dwpe[i]) + sum);
  }
}

// dwte[tokens[b,t], c] += dout[b,t,c]: one thread per element of dout.
template <typename F>
__global__ void encoder_backward_wte_kernel(F* dwte, const F* dout, const int* tokens, int C, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t bt = i / C;
    const int c = static_cast<int>(i % C);
    atomic_add(&dwte[std::size_t(tokens[bt]) * C + c], to_float(dout[i]));
  }
}

}  // namespace

template <typename F>
void encoder_forward(F* out, const int* tokens, const F* wte, const F* wpe, int B, int T, int C, cudaStream_t stream) {
  const std::size_t n = std::size_t(B) * T * C;
  if (n == 0) return;
  encoder_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, tokens, wte, wpe, T, C, n);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void encoder_backward(F* dwte, F* dwpe, const F* dout, const int* tokens, int B, int T, int C, cudaStream_t stream) {
  const std::size_t n = std::size_t(B) * T * C;
  if (n == 0) return;
  encoder_backward_wpe_kernel<<<blocks_for(std::size_t(T) * C), kThreads, 0, stream>>>(dwpe, dout, B, T, C);
  SCALELAB_CUDA_LAUNCH_CHECK();
  encoder_backward_wte_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dwte, dout, tokens, C, n);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

#define SCALELAB_INSTANTIATE(F)                                                                      \
  template void encoder_forward<F>(F*, const int*, const F*, const F*, int, int, int, cudaStream_t); \
  template void encoder_backward<F>(F*, F*, const F*, const int*, int, int, int, cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
