// Stage 06 on the GPU: one transformer block split over t tensor-parallel ranks, the twin of
// dist/tp_block.hpp, composed from the same layer launchers as the whole block
// (kernels/model/gpu_block.hpp) with the collectives of each column -> row pair between them:
//
//   x -> ln_1 -> [f] -> c_attn (column: this rank's heads' q, k, v) -> attention of those NH/t
//     heads -> c_proj (row: those heads' C/t columns, no bias) -> [g] -> + bias -> + x
//     -> ln_2 -> [f] -> c_fc (column: 4C/t features) -> gelu -> c_proj (row) -> [g] -> + bias
//     -> + residual2
//
// Without sequence parallelism f is nothing forward and an all-reduce of the partial input
// gradients backward, g an all-reduce forward and nothing backward: two all-reduces of N x C
// forward and two backward. With it (TpGroup::sequence_parallel) the LayerNorm and residual
// regions hold this rank's Nl = N/t rows, f is an all-gather forward and a reduce-scatter
// backward, g a reduce-scatter forward and an all-gather backward: the same bytes. In the model's
// storage type F (bf16 and fp16 move half, as NCCL does). The row-parallel layers' bias gradient
// is the column sum of this rank's rows of the output gradient: the whole one without sequence
// parallelism, a part with it (summed over the group with the other replicated tensors' after the
// step, dist/tp_model.hpp's sum_sequence_parallel_grads, on the host).
//
// Saved activations per rank, in GpuBlockActs's fields (Cl = C/t, NHl = NH/t, N = B T):
//   ln1, ln2 (N, C) (the column-parallel layers' gathered input); residual2, residual3 (Nl, C);
//   qkv (N, 3Cl); att (B, NHl, T, T) naive only; atty (N, Cl); fch, fch_gelu (N, 4Cl); the
//   LayerNorm statistics 4 Nl and, flash, lse NHl N in fp32: the CPU's carve_tp_block_acts,
//   element for element.
#pragma once

#include <cstddef>

#include "dist/tp_block.hpp"
#include "dist/tp_operators.hpp"
#include "kernels/core/blas.hpp"
#include "kernels/model/gpu_block.hpp"

namespace scalelab::cuda {

// Lays one block's saved activations out (shapes above) from an F carver and a float carver;
// with own_att false `att` is left for the caller (selective checkpointing shares one).
template <typename F, typename Values, typename Stats>
void carve_gpu_tp_block_acts(GpuBlockActs<F>& a, Values& v, Stats& q, const TpDims& d, bool own_att) {
  const std::size_t N = d.N(), Nl = d.rows(), C = static_cast<std::size_t>(d.C), Cl = static_cast<std::size_t>(d.Cl());
  const bool naive = d.attention == AttentionKind::kNaive;
  a.ln1 = v.take(N * C);
  a.ln1_mean = q.take(Nl);
  a.ln1_rstd = q.take(Nl);
  a.qkv = v.take(N * 3 * Cl);
  a.att = naive && own_att ? v.take(static_cast<std::size_t>(d.NHl()) * N * d.T) : nullptr;
  a.atty = v.take(N * Cl);
  a.residual2 = v.take(Nl * C);
  a.ln2 = v.take(N * C);
  a.ln2_mean = q.take(Nl);
  a.ln2_rstd = q.take(Nl);
  a.fch = v.take(N * 4 * Cl);
  a.fch_gelu = v.take(N * 4 * Cl);
  a.residual3 = v.take(Nl * C);
  a.lse = naive ? nullptr : q.take(static_cast<std::size_t>(d.NHl()) * N);
}

// Workspace shared by the blocks (not activations).
template <typename F>
struct GpuTpBlockScratch {
  F* ln = nullptr;               // (Nl, C)  a LayerNorm's output before f gathers it (sequence parallel only)
  F* proj = nullptr;             // (Nl, C)  a row-parallel layer's output after g
  F* full = nullptr;             // (N, C)   partial sums before g or f's backward; gathered gradients
  F* dln = nullptr;              // (Nl, C)  d loss / d LayerNorm output (sequence parallel only)
  F* dwide = nullptr;            // (N, 4Cl) d fch, d fch_gelu; d qkv (3Cl of the 4Cl)
  F* dnarrow = nullptr;          // (N, Cl)  d atty
  F* datt = nullptr;             // (NHl, T, T) naive attention's score gradients of one batch row
  float* ln_partials = nullptr;  // the LayerNorm backward's parameter sums (the caller's)
};
template <typename F, typename Values>
void carve_gpu_tp_block_scratch(GpuTpBlockScratch<F>& s, Values& v, const TpDims& d) {
  const std::size_t N = d.N(), Nl = d.rows(), C = static_cast<std::size_t>(d.C), Cl = static_cast<std::size_t>(d.Cl());
  s.ln = d.sequence_parallel ? v.take(Nl * C) : nullptr;
  s.proj = v.take(Nl * C);
  s.full = v.take(N * C);
  s.dln = d.sequence_parallel ? v.take(Nl * C) : nullptr;
  s.dwide = v.take(N * 4 * Cl);
  s.dnarrow = v.take(N * Cl);
  s.datt = d.attention == AttentionKind::kNaive ? v.take(static_cast<std::size_t>(d.NHl()) * d.T * d.T) : nullptr;
}

// The conjugate operators on device memory (dist/tp_operators.hpp's f and g), each recorded in
// the group's ledger; n = N C, the whole activation. The group's communicator takes device
// memory (NCCL, or host staging ordered after the model's stream); each returns once its result
// is in place. Without sequence parallelism the local and full pointers are the same tensor.
// f forward: x (Nl, C) -> x_full (N, C).   f backward: dx_full (N, C), partial -> dx (Nl, C), summed.
// g forward: y_partial (N, C) -> y (Nl, C), summed.   g backward: dy (Nl, C) -> dy_full (N, C).
template <typename F>
void gpu_f_forward(TpGroup& tp, const F* x, F* x_full, std::size_t n);
template <typename F>
void gpu_f_backward(TpGroup& tp, F* dx_full, F* dx, std::size_t n);
template <typename F>
void gpu_g_forward(TpGroup& tp, F* y_partial, F* y, std::size_t n);
template <typename F>
void gpu_g_backward(TpGroup& tp, const F* dy, F* dy_full, std::size_t n);

// Forward of this rank's part of block `w` on x (Nl, C); fills `a`. Runs on blas.stream().
template <typename F>
void gpu_tp_block_forward(TpGroup& tp, GpuBlockActs<F>& a, const BlockView<F>& w, const F* x, GpuTpBlockScratch<F>& s,
                          const TpDims& d, const Blas& blas);
// Backward: dres (Nl, C) holds d loss / d block output on entry, d loss / d x on exit; this
// rank's parameter gradients accumulate (+=) into g.
template <typename F>
void gpu_tp_block_backward(TpGroup& tp, F* dres, const BlockView<F>& g, const GpuBlockActs<F>& a, const BlockView<F>& w,
                           const F* x, GpuTpBlockScratch<F>& s, const TpDims& d, const Blas& blas);

}  // namespace scalelab::cuda
