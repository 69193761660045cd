// The linear layer on the GPU; twin of model/layers/matmul.hpp: out = inp @ weight^T + bias,
// weight (OC, C) as nn.Linear stores it. The products go through cuBLAS (core/blas.hpp) with
// fp32 accumulation; F: float, bf16, fp16. The trailing argument is the Blas context (it holds
// the stream) instead of a bare stream, because cuBLAS needs its handle too.
#pragma once

#include "kernels/core/blas.hpp"

namespace scalelab::cuda {
// out (N,OC); inp (N,C); weight (OC,C); bias (OC) or nullptr.
// The bias is written into out first and the product added to it by cuBLAS (beta = 1), so in
// bf16/fp16 the sum is rounded once.
template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC, const Blas& blas);
// dinp (N,C) = (written); dweight (OC,C) +=; dbias (OC) += unless nullptr; dout (N,OC).
// dbias is a column sum with a fixed order (deterministic), like layernorm's parameter sums.
template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, int N, int C, int OC,
                     const Blas& blas);
}  // namespace scalelab::cuda
