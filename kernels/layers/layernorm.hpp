// LayerNorm on the GPU; twin of model/layers/layernorm.hpp (same arguments, plus the stream).
// y = (x - mean) * rstd * weight + bias over the last dimension, rstd = 1/sqrt(var + 1e-5).
// F: float, bf16, fp16. The saved statistics mean and rstd are fp32 whatever F is (as in
// PyTorch's autocast and llm.c): they are tiny, and backward recomputes xhat from them.
#pragma once

#include <cuda_runtime_api.h>

namespace scalelab::cuda {
// out (N,C); mean, rstd (N) fp32; inp (N,C); weight, bias (C). N = B*T rows.
template <typename F>
void layernorm_forward(F* out, float* mean, float* rstd, const F* inp, const F* weight, const F* bias, int N, int C,
                       cudaStream_t stream);
// dinp (N,C) +=; dweight, dbias (C) +=; dout (N,C). Deterministic: each sum has a fixed order.
template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, const float* mean,
                        const float* rstd, int N, int C, cudaStream_t stream);
}  // namespace scalelab::cuda
