// Causal multi-head self-attention on the GPU, the clear version (a flash-attention stage comes
// later); twin of model/layers/attention.hpp. Like the CPU twin it forms the full (T,T) score
// matrix of every (batch, head), masks and softmaxes it, and saves the probabilities.
// The products are cuBLAS strided-batched calls over the heads, reading q, k, v in place from
// qkv (head h is hs columns further along each row), so nothing is permuted or copied.
// F: float, bf16, fp16; the softmax runs in fp32.
#pragma once

#include "kernels/core/blas.hpp"

namespace scalelab::cuda {
// out (B,T,C); att (B,NH,T,T) saved softmax probabilities (zero above the diagonal); qkv (B,T,3C).
template <typename F>
void attention_forward(F* out, F* att, const F* qkv, int B, int T, int C, int NH, const Blas& blas);
// dqkv (B,T,3C) = (written); dout (B,T,C); qkv (B,T,3C); att (B,NH,T,T).
// scratch is (NH,T,T) here, not (T,T) as on the CPU: all heads of one batch row are done at once.
template <typename F>
void attention_backward(F* dqkv, F* scratch, const F* dout, const F* qkv, const F* att, int B, int T, int C, int NH,
                        const Blas& blas);
// Elements of attention_backward's scratch: NH * T * T.
inline long long attention_scratch_elements(int T, int NH) { return static_cast<long long>(NH) * T * T; }
}  // namespace scalelab::cuda
