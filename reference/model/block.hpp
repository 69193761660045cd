// One transformer block (pre-LayerNorm GPT-2):
//   x2 = x + attn_proj(attention(qkv(ln_1(x))))
//   y  = x2 + mlp_proj(gelu(mlp_fc(ln_2(x2))))
// with every activation that backward needs saved as a named field.
#pragma once

#include <cstddef>

#include "core/carve.hpp"
#include "model/params.hpp"

namespace scalelab {

// Saved activations of one block. Each pointer points into the model's activation buffer.
template <typename F>
struct BlockActs {
  F* ln1;        // (B,T,C)    ln_1 output
  F* ln1_mean;   // (B,T)
  F* ln1_rstd;   // (B,T)
  F* qkv;        // (B,T,3C)
  F* att;        // (B,NH,T,T) softmax probabilities
  F* atty;       // (B,T,C)    attention output, before the projection
  F* residual2;  // (B,T,C)    x + attention branch
  F* ln2;        // (B,T,C)
  F* ln2_mean;   // (B,T)
  F* ln2_rstd;   // (B,T)
  F* fch;        // (B,T,4C)   mlp_fc output
  F* fch_gelu;   // (B,T,4C)
  F* residual3;  // (B,T,C)    the block's output (the next block's input)
  // Stage 08 (model/attention_block.hpp): chunked and flash attention save this instead of att.
  // Not part of carve_block_acts: the GPU's blocks, which share that carve, have naive attention.
  F* lse = nullptr;  // (B,NH,T)  log-sum-exp of each query's scaled scores
};

// Number of elements of one block's saved activations: 16 BTC + 4 BT + NH B T T.
std::size_t block_act_elements(int B, int T, int C, int NH);
// The layout of one block's saved activations, shared by every model: the fields of `a` (a
// BlockActs, or the GPU's GpuBlockActs) point at the next ranges of `values`, and the LayerNorm
// statistics at the next ranges of `stats` (the same Carver on the CPU; an fp32 one on the GPU,
// whose LayerNorm keeps its statistics in fp32). With own_att false, `att` is left null for the
// caller to point at a shared buffer (stage 02's selective checkpointing).
template <typename Acts, typename Values, typename Stats>
void carve_block_acts(Acts& a, Values& values, Stats& stats, int B, int T, int C, int NH, bool own_att) {
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C;
  a.ln1 = values.take(BTC);
  a.ln1_mean = stats.take(BT);
  a.ln1_rstd = stats.take(BT);
  a.qkv = values.take(3 * BTC);
  a.att = own_att ? values.take(static_cast<std::size_t>(NH) * BT * T) : nullptr;
  a.atty = values.take(BTC);
  a.residual2 = values.take(BTC);
  a.ln2 = values.take(BTC);
  a.ln2_mean = stats.take(BT);
  a.ln2_rstd = stats.take(BT);
  a.fch = values.take(4 * BTC);
  a.fch_gelu = values.take(4 * BTC);
  a.residual3 = values.take(BTC);
}
// The CPU form: everything from one buffer.
template <typename F>
void assign_block_acts(BlockActs<F>& a, Carver<F>& carve, int B, int T, int C, int NH, bool own_att = true) {
  carve_block_acts(a, carve, carve, B, T, C, NH, own_att);
}

// Backward scratch shared by all blocks (workspace, not activations).
template <typename F>
struct BlockScratch {
  F* proj;   // (B,T,C)  projection output before the residual add (forward)
  F* dbtc;   // (B,T,C)  gradient of ln1/ln2/atty outputs
  F* dwide;  // (B,T,4C) gradient of fch/fch_gelu, and of qkv (3C of the 4C)
  F* dtt;    // (T,T)    attention score gradient of one (batch, head); stage 08: the chunked
             //          or flash attention's workspace (attention_scratch_elements)
};

// Forward of block `w` on input x (B,T,C); fills `a`.
template <typename F>
void block_forward(BlockActs<F>& a, const BlockView<F>& w, const F* x, BlockScratch<F>& s, int B, int T, int C, int NH);
// Backward: on entry dres (B,T,C) holds d loss / d block output; on exit d loss / d block input x.
// Parameter gradients accumulate into g.
template <typename F>
void block_backward(F* dres, const BlockView<F>& g, const BlockActs<F>& a, const BlockView<F>& w, const F* x,
                    BlockScratch<F>& s, int B, int T, int C, int NH);

}  // namespace scalelab
