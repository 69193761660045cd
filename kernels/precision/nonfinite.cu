// The inf/NaN scan: each thread checks a grid-stride slice and only a thread that saw a bad
// value writes the flag, so the common (clean) case does no writes at all.
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/precision/nonfinite.hpp"

namespace scalelab::cuda {

namespace {
template <typename F>
__global__ void find_nonfinite_kernel(unsigned int* found, const F* x, std::size_t n) {
  bool bad = false;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    bad |= !isfinite(to_float(x[i]));  // bf16/fp16 inf and NaN convert to fp32 inf and NaN
  if (bad) atomicOr(found, 1u);
}
}  // namespace

template <typename F>
void find_nonfinite(unsigned int* found, const F* x, std::size_t N, cudaStream_t stream) {
  if (N == 0) return;
  find_nonfinite_kernel<<<blocks_for(N), kThreads, 0, stream>>>(found, x, N);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

#define SCALELAB_INSTANTIATE(F) template void find_nonfinite<F>(unsigned int*, const F*, std::size_t, cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
