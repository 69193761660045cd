// Elementwise conversions through the CUDA intrinsics __float2bfloat16_rn / __float2half_rn
// (round to nearest even; they do not flush subnormals) and their exact inverses.
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/precision/cast.hpp"

namespace scalelab::cuda {

namespace {
template <typename To, typename From>
__global__ void cast_kernel(To* out, const From* in, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = from_float<To>(to_float(in[i]));  // to_float is exact; from_float rounds once
}
}  // namespace

template <typename To, typename From>
void cast(To* out, const From* in, std::size_t N, cudaStream_t stream) {
  if (N == 0) return;
  cast_kernel<To, From><<<blocks_for(N), kThreads, 0, stream>>>(out, in, N);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template void cast<bf16, float>(bf16*, const float*, std::size_t, cudaStream_t);
template void cast<fp16, float>(fp16*, const float*, std::size_t, cudaStream_t);
template void cast<float, bf16>(float*, const bf16*, std::size_t, cudaStream_t);
template void cast<float, fp16>(float*, const fp16*, std::size_t, cudaStream_t);
template void cast<float, float>(float*, const float*, std::size_t, cudaStream_t);
template void cast<bf16, bf16>(bf16*, const bf16*, std::size_t, cudaStream_t);
template void cast<fp16, fp16>(fp16*, const fp16*, std::size_t, cudaStream_t);

}  // namespace scalelab::cuda
