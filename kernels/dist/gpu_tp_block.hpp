// Stage 06 on the GPU: one transformer block split over t tensor-parallel ranks, the twin of
// dist/tp_block.hpp without sequence parallelism, composed from the same layer launchers as the
// whole block (kernels/model/gpu_block.hpp) with the two collectives of each pair between them:
//
//   x -> ln_1 -> c_attn (column: this rank's heads' q, k, v) -> attention of those NH/t heads
//     -> c_proj (row: those heads' C/t columns, no bias) -> all-reduce [g] -> + bias -> + x
//     -> ln_2 -> c_fc (column: 4C/t features) -> gelu -> c_proj (row) -> all-reduce [g] -> + bias
//     -> + residual2
//
// backward: the row-parallel layers need nothing (g's backward is the identity; their bias
// gradient is the column sum of the whole output gradient, which every rank holds); after each
// column-parallel layer the partial input gradients are all-reduced [f's backward] before the
// LayerNorm's backward. Two all-reduces of N x C forward and two backward, as on the CPU, in the
// model's storage type F (bf16 and fp16 sum in half, as NCCL does).
//
// Saved activations per rank, in GpuBlockActs's fields (Cl = C/t, NHl = NH/t, N = B T):
//   ln1, residual2, ln2, residual3 (N, C); qkv (N, 3Cl); att (B, NHl, T, T) naive only;
//   atty (N, Cl); fch, fch_gelu (N, 4Cl); LayerNorm statistics 4N and, flash, lse NHl N in fp32.
// So 4 N C + 12 N Cl (+ NHl N T) elements of F: the CPU's carve_tp_block_acts without sequence
// parallelism, element for element.
#pragma once

#include <cstddef>

#include "dist/tp_operators.hpp"
#include "kernels/core/blas.hpp"
#include "kernels/model/gpu_block.hpp"

namespace scalelab::cuda {

// One rank's block dimensions.
struct GpuTpDims {
  int B = 0, T = 0, C = 0, NH = 0, t = 1;
  AttentionKind attention = AttentionKind::kNaive;
  int N() const { return B * T; }
  int Cl() const { return C / t; }
  int NHl() const { return NH / t; }
};

// Elements of one block's saved activations stored as F (own_att false: att is the caller's, as
// selective checkpointing shares one) and as fp32.
std::size_t gpu_tp_block_f_elements(const GpuTpDims& d, bool own_att);
std::size_t gpu_tp_block_stat_elements(const GpuTpDims& d);
// Lays one block's saved activations out (shapes above) from an F carver and a float carver.
template <typename F, typename Values, typename Stats>
void carve_gpu_tp_block_acts(GpuBlockActs<F>& a, Values& v, Stats& q, const GpuTpDims& d, bool own_att) {
  const std::size_t N = static_cast<std::size_t>(d.N()), C = static_cast<std::size_t>(d.C),
                    Cl = static_cast<std::size_t>(d.Cl());
  const bool naive = d.attention == AttentionKind::kNaive;
  a.ln1 = v.take(N * C);
  a.ln1_mean = q.take(N);
  a.ln1_rstd = q.take(N);
  a.qkv = v.take(N * 3 * Cl);
  a.att = naive && own_att ? v.take(static_cast<std::size_t>(d.NHl()) * N * d.T) : nullptr;
  a.atty = v.take(N * Cl);
  a.residual2 = v.take(N * C);
  a.ln2 = v.take(N * C);
  a.ln2_mean = q.take(N);
  a.ln2_rstd = q.take(N);
  a.fch = v.take(N * 4 * Cl);
  a.fch_gelu = v.take(N * 4 * Cl);
  a.residual3 = v.take(N * C);
  a.lse = naive ? nullptr : q.take(static_cast<std::size_t>(d.NHl()) * N);
}

// Workspace shared by the blocks: GpuBlockScratch's fields with this rank's shapes: proj (N, C)
// the row-parallel outputs, dbtc (N, C) the partial input gradients, dwide (N, 4Cl), datt
// (NHl, T, T) naive only.
std::size_t gpu_tp_block_scratch_elements(const GpuTpDims& d);
template <typename F, typename Values>
void carve_gpu_tp_block_scratch(GpuBlockScratch<F>& s, Values& v, const GpuTpDims& d) {
  const std::size_t N = static_cast<std::size_t>(d.N()), C = static_cast<std::size_t>(d.C);
  s.proj = v.take(N * C);
  s.dbtc = v.take(N * C);
  s.dwide = v.take(N * 4 * static_cast<std::size_t>(d.Cl()));
  s.datt = d.attention == AttentionKind::kNaive ? v.take(static_cast<std::size_t>(d.NHl()) * d.T * d.T) : nullptr;
}

// data (n, on the device) summed over the group in place, in F, recorded in its ledger. The
// group's communicator takes device memory (NCCL, or host staging ordered after the model's
// stream); it returns once the sum is in place.
template <typename F>
void gpu_tp_all_reduce(TpGroup& tp, F* data, std::size_t n);

// Forward of this rank's part of block `w` on x (N, C); fills `a`. Runs on blas.stream().
template <typename F>
void gpu_tp_block_forward(TpGroup& tp, GpuBlockActs<F>& a, const BlockView<F>& w, const F* x, GpuBlockScratch<F>& s,
                          const GpuTpDims& d, const Blas& blas);
// Backward: dres (N, C) holds d loss / d block output on entry, d loss / d x on exit; this rank's
// parameter gradients accumulate (+=) into g.
template <typename F>
void gpu_tp_block_backward(TpGroup& tp, F* dres, const BlockView<F>& g, const GpuBlockActs<F>& a, const BlockView<F>& w,
                           const F* x, GpuBlockScratch<F>& s, const GpuTpDims& d, const Blas& blas);

}  // namespace scalelab::cuda
