// One transformer block on the GPU, the twin of model/block.hpp: the same layer calls in the
// same order, through the CUDA launchers of kernels/layers. F: float, bf16 or fp16 storage.
//   x2 = x + attn_proj(attention(qkv(ln_1(x))))
//   y  = x2 + mlp_proj(gelu(mlp_fc(ln_2(x2))))
// The only difference from BlockActs: the LayerNorm statistics are fp32 whatever F is, because
// the GPU LayerNorm saves them in fp32 (kernels/layers/layernorm.hpp).
#pragma once

#include <cstddef>

#include "kernels/core/blas.hpp"
#include "model/block.hpp"
#include "model/layers/attention_kind.hpp"
#include "model/params.hpp"

namespace scalelab::cuda {

// Saved activations of one block, device pointers into the model's activation buffers.
template <typename F>
struct GpuBlockActs {
  F* ln1;           // (B,T,C)    ln_1 output
  float* ln1_mean;  // (B,T)
  float* ln1_rstd;  // (B,T)
  F* qkv;           // (B,T,3C)
  F* att;           // (B,NH,T,T) softmax probabilities (naive attention; null with flash)
  F* atty;          // (B,T,C)    attention output, before the projection
  F* residual2;     // (B,T,C)    x + attention branch
  F* ln2;           // (B,T,C)
  float* ln2_mean;  // (B,T)
  float* ln2_rstd;  // (B,T)
  F* fch;           // (B,T,4C)   mlp_fc output
  F* fch_gelu;      // (B,T,4C)
  F* residual3;     // (B,T,C)    the block's output (the next block's input)
  // Stage 08: flash attention saves this instead of att, in fp32 (kernels/layers/attention_flash.hpp
  // says why). Not part of carve_block_acts: the model carves it from its fp32 statistics.
  float* lse = nullptr;  // (B,NH,T)  log-sum-exp of each query's scaled scores
};

// Elements of one block's saved activations: 16 BTC + NH B T T of F, and 4 BT of float. Their
// sum is the CPU's block_act_elements (model/block.hpp).
std::size_t gpu_block_f_elements(int B, int T, int C, int NH, bool own_att = true);
std::size_t gpu_block_stat_elements(int B, int T);

// The layout of one block's activations: carve_block_acts (model/block.hpp) with the values
// from an F carver and the statistics from a float one.

// Scratch shared by all blocks (workspace, not activations).
template <typename F>
struct GpuBlockScratch {
  F* proj;             // (B,T,C)  projection output before the residual add (forward)
  F* dbtc;             // (B,T,C)  gradient of ln1/ln2/atty outputs
  F* dwide;            // (B,T,4C) gradient of fch/fch_gelu, and of qkv (3C of the 4C)
  F* datt;             // (NH,T,T) attention_backward's score gradients of one batch row (all heads);
                       //          null with flash attention, which needs no workspace
  float* ln_partials;  // layernorm_backward_scratch_elements(C): the LayerNorm parameter sums by chunk
};

// Forward of block `w` on input x (B,T,C); fills `a`. Everything runs on blas.stream().
// attention: kNaive (attention.hpp, saves att) or kFlash (attention_flash.hpp, saves lse); the
// one place where the GPU model's attention kind takes effect.
template <typename F>
void gpu_block_forward(GpuBlockActs<F>& a, const BlockView<F>& w, const F* x, GpuBlockScratch<F>& s, int B, int T,
                       int C, int NH, AttentionKind attention, const Blas& blas);
// Backward: on entry dres (B,T,C) holds d loss / d block output; on exit d loss / d block input.
// Parameter gradients accumulate (+=) into g.
template <typename F>
void gpu_block_backward(F* dres, const BlockView<F>& g, const GpuBlockActs<F>& a, const BlockView<F>& w, const F* x,
                        GpuBlockScratch<F>& s, int B, int T, int C, int NH, AttentionKind attention, const Blas& blas);

}  // namespace scalelab::cuda
