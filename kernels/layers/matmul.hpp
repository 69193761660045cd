// The linear layer on the GPU; twin of model/layers/matmul.hpp: out = inp @ weight^T + bias,
// weight (OC, C) as nn.Linear stores it. The products go through cuBLAS (core/blas.hpp) with
// fp32 accumulation; F: float, bf16, fp16. The trailing argument is the Blas context (it holds
// the stream) instead of a bare stream, because cuBLAS needs its handle too.
#pragma once

#include "kernels/core/blas.hpp"

namespace scalelab::cuda {
// out (N,OC) with rows ld_out >= OC elements apart; inp (N,C); weight (OC,C); bias (OC) or nullptr.
// Only the first OC columns of each row of out are written. The bias is written into out first
// and the product added to it by cuBLAS (beta = 1), so in bf16/fp16 the sum is rounded once.
// A row stride above OC is for the LM head (kernels/model/gpu_gpt.hpp): with V = 50257 the
// logits' rows would be an odd number of elements apart, which misaligns cuBLAS's output. With
// aligned rows (ld_out a multiple of 8) and OC not a multiple of 8, the products are split into
// the aligned bulk of the OC columns and the few left over (matmul.cu says why): in fp32 the
// sums' order changes only in dinp's sum over OC, in bf16/fp16 dinp is also rounded twice.
template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC, int ld_out,
                    const Blas& blas);
// dinp (N,C) = (written); dweight (OC,C) +=; dbias (OC) += unless nullptr; dout (N,OC) with rows
// ld_out >= OC elements apart, of which only the first OC columns are read.
// dbias is a column sum with a fixed order (deterministic), like layernorm's parameter sums.
template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, int N, int C, int OC,
                     int ld_out, const Blas& blas);

// dbias (OC) += the column sums of dout (N,OC), contiguous rows: matmul_backward's bias part alone
// (a row-parallel layer's bias under tensor parallelism, from this rank's rows only).
template <typename F>
void matmul_backward_bias(F* dbias, const F* dout, int N, int OC, const Blas& blas);

// The MLP's fc layer and its GELU in one: pre (N,OC) = inp (N,C) @ weight^T + bias, out (N,OC) =
// gelu(pre), both written (pre is what the backward needs). In bf16/fp16 one cuBLASLt product
// computes both from its fp32 result (blas.hpp, Epilogue::kGeluBias); in fp32, or where cuBLASLt
// does not fuse the shape, matmul_forward then gelu_forward, as the CPU twin does.
template <typename F>
void matmul_gelu_forward(F* out, F* pre, const F* inp, const F* weight, const F* bias, int N, int C, int OC,
                         const Blas& blas);
// The fc projection's backward taken through the GELU before it: dpre (N,C) = gelu'(pre) *
// (dout (N,OC) @ weight), i.e. matmul_backward's dinp followed by gelu_backward, in one product in
// bf16/fp16 (Epilogue::kDGelu); dweight (OC,C) += dout^T @ inp and dbias (OC) += the column sums
// of dout as in matmul_backward. inp is gelu(pre), the projection's input.
template <typename F>
void matmul_gelu_backward(F* dpre, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, const F* pre,
                          int N, int C, int OC, const Blas& blas);

// The same with contiguous rows (ld_out = OC): every layer but the LM head.
template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC, const Blas& blas) {
  matmul_forward(out, inp, weight, bias, N, C, OC, OC, blas);
}
template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, int N, int C, int OC,
                     const Blas& blas) {
  matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, OC, blas);
}
}  // namespace scalelab::cuda
