// Stage 06: one transformer block split over t tensor-parallel ranks (Megatron-LM):
//
//   x -> ln_1 -> [f] -> c_attn (column: this rank's heads' q, k, v) -> attention of those heads
//     -> c_proj (row: those heads' columns) -> [g] -> + bias -> + x = residual2
//     -> ln_2 -> [f] -> c_fc (column: 4C/t features) -> gelu -> c_proj (row) -> [g] -> + bias
//     -> + residual2 = residual3
//
// Two all-reduces forward (the g's) and two backward (the f's), each of N x C elements; with
// sequence parallelism an all-gather and a reduce-scatter in place of each, the LayerNorm and
// residual tensors holding this rank's N/t rows.
//
// The saved activations reuse stage 00's BlockActs fields with the shapes of a rank (Nl: the
// rows of the LayerNorm/residual region, N or N/t; Cl = C/t; NHl = NH/t):
//   ln1, ln2     (N, C)       the column-parallel layers' whole input, f's output (under
//                             sequence parallelism the gathered copy is kept, so backward
//                             need not gather it again; Megatron gathers it again instead)
//   *_mean/rstd  (Nl)
//   qkv          (N, 3Cl)     att (B, NHl, T, T)    atty (N, Cl)
//   fch, fch_gelu (N, 4Cl)
//   residual2, residual3 (Nl, C)
#pragma once

#include <cstddef>
#include <functional>

#include "dist/tp_operators.hpp"
#include "model/attention_block.hpp"
#include "model/block.hpp"
#include "model/config.hpp"
#include "model/params.hpp"

namespace scalelab {

// The dimensions of one rank's block.
struct TpDims {
  int B = 0, T = 0, C = 0, NH = 0, t = 1;
  bool sequence_parallel = false;
  AttentionKind attention = AttentionKind::kNaive;  // stage 08: on this rank's heads
  std::size_t N() const { return static_cast<std::size_t>(B) * T; }
  std::size_t rows() const { return sequence_parallel ? N() / t : N(); }  // Nl
  int Cl() const { return C / t; }
  int NHl() const { return NH / t; }
};

// The dimensions of a micro-batch of B x T tokens on this rank of `tp`. Under sequence
// parallelism its N = B T token rows must split over the group: ConfigError otherwise.
TpDims tp_dims(const TpGroup& tp, const GPTConfig& config, int B, int T, AttentionKind attention);

// ZB-H1's tape for one block of this rank (tp_block_backward with `defer`): the output gradients
// of its four linear layers, N rows each: (N, C) for the row-parallel c_proj layers (the
// gathered dy), (N, 3C/t) and (N, 4C/t) for the column-parallel c_attn and c_fc.
inline std::size_t tp_block_tape_elements(const TpDims& d) {
  return d.N() * (2 * static_cast<std::size_t>(d.C) + 7 * static_cast<std::size_t>(d.Cl()));
}

// Lays one block's saved activations (shapes above) into `values`, stage 00's field order.
// Values has take(n) (a Carver, or a counter that sizes the buffer first). With own_att false
// `att` is left for the caller (selective checkpointing's shared buffer).
template <typename Values>
void carve_tp_block_acts(BlockActs<float>& a, Values& v, const TpDims& d, bool own_att) {
  const std::size_t N = d.N(), Nl = d.rows(), C = static_cast<std::size_t>(d.C), Cl = static_cast<std::size_t>(d.Cl());
  a.ln1 = v.take(N * C);
  a.ln1_mean = v.take(Nl);
  a.ln1_rstd = v.take(Nl);
  a.qkv = v.take(N * 3 * Cl);
  const bool naive = d.attention == AttentionKind::kNaive;
  a.att = naive && own_att ? v.take(static_cast<std::size_t>(d.NHl()) * N * d.T) : nullptr;
  a.atty = v.take(N * Cl);
  a.residual2 = v.take(Nl * C);
  a.ln2 = v.take(N * C);
  a.ln2_mean = v.take(Nl);
  a.ln2_rstd = v.take(Nl);
  a.fch = v.take(N * 4 * Cl);
  a.fch_gelu = v.take(N * 4 * Cl);
  a.residual3 = v.take(Nl * C);
  // Chunked and flash attention keep the log-sum-exp of the rank's heads, (B, NH/t, T).
  a.lse = naive ? nullptr : v.take(static_cast<std::size_t>(d.NHl()) * N);
}

// Workspace shared by all blocks (not activations).
struct TpBlockScratch {
  float* ln = nullptr;       // (Nl, C)   a LayerNorm's output before f gathers it (sequence parallel)
  float* proj = nullptr;     // (Nl, C)   a row-parallel layer's output after g
  float* full = nullptr;     // (N, C)    partial sums before g; whole gradients after g's backward
  float* dln = nullptr;      // (Nl, C)   d loss / d LayerNorm output
  float* dwide = nullptr;    // (N, 4Cl)  d fch, d fch_gelu; d qkv (3Cl of the 4Cl)
  float* dnarrow = nullptr;  // (N, Cl)   d atty
  float* dtt = nullptr;      // the attention's workspace: naive (T, T), one (batch, head)'s score gradient
};
template <typename Values>
void carve_tp_block_scratch(TpBlockScratch& s, Values& v, const TpDims& d) {
  const std::size_t N = d.N(), Nl = d.rows(), C = static_cast<std::size_t>(d.C), Cl = static_cast<std::size_t>(d.Cl());
  s.ln = d.sequence_parallel ? v.take(Nl * C) : nullptr;
  s.proj = v.take(Nl * C);
  s.full = v.take(N * C);
  s.dln = v.take(Nl * C);
  s.dwide = v.take(N * 4 * Cl);
  s.dnarrow = v.take(N * Cl);
  s.dtt = v.take(attention_scratch_elements(d.attention, d.T));
}

// Forward of this rank's part of block `w` on x (Nl, C); fills `a`.
void tp_block_forward(TpGroup& tp, BlockActs<float>& a, const BlockView<float>& w, const float* x, TpBlockScratch& s,
                      const TpDims& d);
// Stage 05's zero-bubble split (model/split_backward.hpp) for a tensor-parallel block: where the
// backward would add a linear layer's weight gradient, dweight (OC, C) += dout^T (OC, N) @ inp
// (N, C), it calls this instead, to be added later. dout is workspace (copy it now); inp is a
// saved activation of the block (valid while its micro-batch's activations are kept).
using DeferWeightGrad = std::function<void(float* dweight, const float* dout, const float* inp, int N, int C, int OC)>;

// Backward: dres (Nl, C) holds d loss / d block output on entry, d loss / d x on exit;
// this rank's parameter gradients accumulate into g. With `defer` (ZB-H1's input pass) the four
// linear layers' weight gradients go to it; everything else (the collectives, which every rank of
// the group must issue in the same order, the biases' and the LayerNorms' gradients) runs now.
void tp_block_backward(TpGroup& tp, float* dres, const BlockView<float>& g, const BlockActs<float>& a,
                       const BlockView<float>& w, const float* x, TpBlockScratch& s, const TpDims& d,
                       const DeferWeightGrad* defer = nullptr);

}  // namespace scalelab
