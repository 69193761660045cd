// LayerNorm on the GPU; twin of model/layers/layernorm.hpp (same arguments, plus the stream).
// y = (x - mean) * rstd * weight + bias over the last dimension, rstd = 1/sqrt(var + 1e-5).
// F: float, bf16, fp16. The saved statistics mean and rstd are fp32 whatever F is (as in
// PyTorch's autocast and llm.c): they are tiny, and backward recomputes xhat from them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace scalelab::cuda {
// out (N,C); mean, rstd (N) fp32; inp (N,C); weight, bias (C). N = B*T rows.
template <typename F>
void layernorm_forward(F* out, float* mean, float* rstd, const F* inp, const F* weight, const F* bias, int N, int C,
                       cudaStream_t stream);
// The residual add and the LayerNorm after it in one pass over the rows (llm.c and PyTorch's
// compiler fuse them too): residual (N,C) = a + b, rounded to F as residual_forward rounds it,
// then out, mean, rstd = layernorm_forward of residual. The same values, bit for bit, as those two
// calls, with one read of the residual stream less. residual may be a (in place).
template <typename F>
void residual_layernorm_forward(F* residual, F* out, float* mean, float* rstd, const F* a, const F* b, const F* weight,
                                const F* bias, int N, int C, cudaStream_t stream);
// dinp (N,C) +=; dweight, dbias (C) +=; dout (N,C); scratch: layernorm_backward_scratch_elements(C)
// fp32 values of workspace (the per-chunk partial sums of dweight and dbias). Deterministic: each
// sum has a fixed order for a given N. `kernel` picks the row kernel (layernorm_kernels.cuh):
// kAuto the fastest that fits C; kStreamed the one for any C, which gives the same bits (the
// tests compare the two; the benchmark times both).
enum class LayerNormBackwardKernel { kAuto, kStreamed };
template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, float* scratch, const F* dout, const F* inp, const F* weight,
                        const float* mean, const float* rstd, int N, int C, cudaStream_t stream,
                        LayerNormBackwardKernel kernel = LayerNormBackwardKernel::kAuto);

// dweight and dbias are sums over the N rows. The backward kernel cuts the rows into this many
// slots: each slot's rows are one thread block cluster's (4 blocks that add their sums in rank
// order), its partial sums of dweight and dbias one row of the scratch, and a second kernel adds
// the slots in order (layernorm.cu says why clusters: this many blocks alone would leave half the
// SMs idle).
constexpr int kLayerNormParamChunks = 64;
inline std::size_t layernorm_backward_scratch_elements(int C) {
  return 2 * static_cast<std::size_t>(kLayerNormParamChunks) * static_cast<std::size_t>(C);
}
}  // namespace scalelab::cuda
