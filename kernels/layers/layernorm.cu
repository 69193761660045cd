// LayerNorm on the GPU: the launchers of the kernels in layernorm_kernels.cuh (which describes
// them; tests/simt/ runs the same kernels on the CPU).
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/layernorm.hpp"
#include "kernels/layers/layernorm_kernels.cuh"

namespace scalelab::cuda {

namespace {

using namespace layernorm_kernels;

// The forward kernel over N rows, with 16-byte accesses where every tensor's rows allow them.
template <typename F, bool kResidual>
void launch_layernorm_forward(F* out, float* mean, float* rstd, const F* inp, F* residual, const F* a, const F* b,
                              const F* weight, const F* bias, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = layernorm_forward_blocks(N);
  if (rows_on_16_bytes<F>(C, {out, inp, residual, a, b, weight, bias}))
    layernorm_forward_kernel<F, Pack16<F>::kSize, kResidual>
        <<<blocks, kRowsPerBlock * 32, 0, stream>>>(out, mean, rstd, inp, residual, a, b, weight, bias, N, C);
  else
    layernorm_forward_kernel<F, 1, kResidual>
        <<<blocks, kRowsPerBlock * 32, 0, stream>>>(out, mean, rstd, inp, residual, a, b, weight, bias, N, C);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

}  // namespace

template <typename F>
void layernorm_forward(F* out, float* mean, float* rstd, const F* inp, const F* weight, const F* bias, int N, int C,
                       cudaStream_t stream) {
  launch_layernorm_forward<F, false>(out, mean, rstd, inp, nullptr, nullptr, nullptr, weight, bias, N, C, stream);
}

template <typename F>
void residual_layernorm_forward(F* residual, F* out, float* mean, float* rstd, const F* a, const F* b, const F* weight,
                                const F* bias, int N, int C, cudaStream_t stream) {
  launch_layernorm_forward<F, true>(out, mean, rstd, residual, residual, a, b, weight, bias, N, C, stream);
}

template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, float* scratch, const F* dout, const F* inp, const F* weight,
                        const float* mean, const float* rstd, int N, int C, cudaStream_t stream,
                        LayerNormBackwardKernel kernel) {
  if (N <= 0 || C <= 0) return;
  const BackwardLaunch l = layernorm_backward_launch(N, C);
  float* partial_w = scratch;
  float* partial_b = scratch + static_cast<std::size_t>(kLayerNormParamChunks) * C;
  const BackwardRowKernel<F> rows = pick_backward_row_kernel(C, dinp, dout, inp, weight, kernel);
  if (l.shared_bytes > 48 * 1024)
    SCALELAB_CUDA_CHECK(
        cudaFuncSetAttribute(rows, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(l.shared_bytes)));
  rows<<<l.blocks, l.warps * 32, l.shared_bytes, stream>>>(dinp, partial_w, partial_b, dout, inp, weight, mean, rstd, N,
                                                           C, l.block_rows);
  SCALELAB_CUDA_LAUNCH_CHECK();
  layernorm_backward_params_total_kernel<<<(C + 31) / 32, dim3(32, 8), 0, stream>>>(dweight, dbias, partial_w,
                                                                                    partial_b, C, l.slots);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

#define SCALELAB_INSTANTIATE(F)                                                                                     \
  template void layernorm_forward<F>(F*, float*, float*, const F*, const F*, const F*, int, int, cudaStream_t);     \
  template void residual_layernorm_forward<F>(F*, F*, float*, float*, const F*, const F*, const F*, const F*, int,  \
                                              int, cudaStream_t);                                                   \
  template void layernorm_backward<F>(F*, F*, F*, float*, const F*, const F*, const F*, const float*, const float*, \
                                      int, int, cudaStream_t, LayerNormBackwardKernel);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
