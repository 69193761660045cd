// Flash attention on the GPU (stage 08), the twin of model/layers/attention_flash.hpp: causal
// multi-head attention that never forms the (T,T) score matrix in memory. After Dao et al. (2022)
// and FlashAttention-2 (Dao, 2023):
//
//   forward   one thread block per (64 queries, batch row, head); key tiles of 64 up to the
//             diagonal; each tile's scores S = scale q k^T and the product P v are tensor-core
//             products (bf16/fp16) in shared memory, with the online softmax (running maximum m
//             and sum l per query) in between. Saves only lse = m + log l per query, in fp32.
//   backward  two kernels, no atomics (the result is the same bit for bit on every run):
//             dk, dv: one block per 64 keys, looping over the query tiles at or below the
//                     diagonal: P = exp(S - lse) recomputed, dv += P^T dout, dk += dS^T q;
//             dq:     one block per 64 queries, looping over the key tiles: dq += dS k;
//             with dS = P (dP - D), dP = dout v^T and D_t = dout_t . out_t (computed per tile
//             from dout and out: no (B,NH,T) buffer of it is kept).
//
// The log-sum-exp stays fp32 whatever F is: in bf16 an lse near 10 would be off by up to 0.03,
// so the recomputed probabilities exp(s - lse) would be off by up to 3% and no longer sum to 1.
// The GPU model keeps it beside its fp32 LayerNorm statistics.
//
// F: float, bf16, fp16. In bf16/fp16 the tile products run on tensor cores (nvcuda::wmma, fp32
// accumulation) with P and dS rounded to F as their inputs; in fp32 they are plain fp32 products
// on the CUDA cores (no TF32), so an fp32 run matches the CPU twin within fp32 rounding. The
// head size may be anything up to 128 (tiles are zero-padded to a multiple of 16 columns).
#pragma once

#include <cuda_runtime_api.h>

namespace scalelab::cuda {

constexpr int kFlashTile = 64;  // queries per block in forward and dq; keys per block in dk, dv

// out (B,T,C) = (written); lse (B,NH,T) fp32 = (written); qkv (B,T,3C) as attention.hpp reads it.
template <typename F>
void attention_flash_forward(F* out, float* lse, const F* qkv, int B, int T, int C, int NH, cudaStream_t stream);

// dqkv (B,T,3C) = (written: every q, k and v column of every head); dout (B,T,C); qkv (B,T,3C);
// out (B,T,C) and lse (B,NH,T) from attention_flash_forward. No workspace.
template <typename F>
void attention_flash_backward(F* dqkv, const F* dout, const F* qkv, const F* out, const float* lse, int B, int T, int C,
                              int NH, cudaStream_t stream);

}  // namespace scalelab::cuda
