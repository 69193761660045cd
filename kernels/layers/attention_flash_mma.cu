// Flash attention with its tiles in registers (bf16/fp16, head sizes 16, 32, 64, 128): the
// launchers of the kernels in attention_flash_mma_kernels.cuh (the algorithm is described there).
#include <cstddef>

#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/attention_flash_mma.hpp"
#include "kernels/layers/attention_flash_mma_kernels.cuh"

namespace scalelab::cuda {

namespace {

using namespace flash_mma;

template <typename Kernel>
void allow_shared(Kernel kernel, std::size_t bytes) {
  // At most 139 KB (dk/dv at HS = 128), under every sm_90 GPU's 227 KB a block.
  SCALELAB_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <int HS, typename F>
void forward_for(F* out, float* lse, const F* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
  const Scales s = scales<HS>();
  allow_shared(forward_kernel<HS, F>, forward_bytes<HS, F>());
  forward_kernel<HS, F>
      <<<grid(B, T, NH), kThreadsPerBlock, forward_bytes<HS, F>(), stream>>>(out, lse, qkv, T, C, NH, s.scale_log2);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <int HS, typename F>
void backward_for(F* dqkv, const F* dout, const F* qkv, const F* out, const float* lse, int B, int T, int C, int NH,
                  cudaStream_t stream) {
  const Scales s = scales<HS>();
  allow_shared(dkdv_kernel<HS, F>, dkdv_bytes<HS, F>());
  dkdv_kernel<HS, F><<<grid(B, T, NH), kThreadsPerBlock, dkdv_bytes<HS, F>(), stream>>>(dqkv, dout, qkv, out, lse, T, C,
                                                                                        NH, s.scale, s.scale_log2);
  SCALELAB_CUDA_LAUNCH_CHECK();
  allow_shared(dq_kernel<HS, F>, dq_bytes<HS, F>());
  dq_kernel<HS, F><<<grid(B, T, NH), kThreadsPerBlock, dq_bytes<HS, F>(), stream>>>(dqkv, dout, qkv, out, lse, T, C, NH,
                                                                                    s.scale, s.scale_log2);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool flash_mma_applies(int head_size, int C, const void* a, const void* b, const void* c, const void* d) {
  const bool compiled = head_size == 16 || head_size == 32 || head_size == 64 || head_size == 128;
  return compiled && C % 8 == 0 && aligned16(a) && aligned16(b) && aligned16(c) && aligned16(d);
}

template <typename F>
void flash_mma_forward(F* out, float* lse, const F* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
  with_head_size(C / NH, [&]<int HS>() { forward_for<HS>(out, lse, qkv, B, T, C, NH, stream); });
}

template <typename F>
void flash_mma_backward(F* dqkv, const F* dout, const F* qkv, const F* out, const float* lse, int B, int T, int C,
                        int NH, cudaStream_t stream) {
  with_head_size(C / NH, [&]<int HS>() { backward_for<HS>(dqkv, dout, qkv, out, lse, B, T, C, NH, stream); });
}

#define SCALELAB_INSTANTIATE(F)                                                               \
  template void flash_mma_forward<F>(F*, float*, const F*, int, int, int, int, cudaStream_t); \
  template void flash_mma_backward<F>(F*, const F*, const F*, const F*, const float*, int, int, int, int, cudaStream_t);
SCALELAB_INSTANTIATE(bf16)
SCALELAB_INSTANTIATE(fp16)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
