// The tensor-parallel block on the GPU: kernels/model/gpu_block.cpp with the rank's shapes and
// the two collectives of each column -> row pair.
#include "kernels/dist/gpu_tp_block.hpp"

#include <cstdint>
#include <type_traits>

#include "kernels/core/dtype.hpp"
#include "kernels/layers/attention.hpp"
#include "kernels/layers/attention_flash.hpp"
#include "kernels/layers/gelu.hpp"
#include "kernels/layers/layernorm.hpp"
#include "kernels/layers/matmul.hpp"
#include "kernels/layers/residual.hpp"
#include "kernels/layers/tensor_parallel.hpp"

namespace scalelab::cuda {

std::size_t gpu_tp_block_f_elements(const GpuTpDims& d, bool own_att) {
  const std::size_t N = static_cast<std::size_t>(d.N());
  const bool att = d.attention == AttentionKind::kNaive && own_att;
  return 4 * N * d.C + 12 * N * d.Cl() + (att ? static_cast<std::size_t>(d.NHl()) * N * d.T : 0);
}

std::size_t gpu_tp_block_stat_elements(const GpuTpDims& d) {
  const std::size_t N = static_cast<std::size_t>(d.N());
  return 4 * N + (d.attention == AttentionKind::kNaive ? 0 : static_cast<std::size_t>(d.NHl()) * N);
}

std::size_t gpu_tp_block_scratch_elements(const GpuTpDims& d) {
  const std::size_t N = static_cast<std::size_t>(d.N());
  const std::size_t datt = d.attention == AttentionKind::kNaive ? static_cast<std::size_t>(d.NHl()) * d.T * d.T : 0;
  return 2 * N * d.C + 4 * N * d.Cl() + datt;
}

template <typename F>
void gpu_tp_all_reduce(TpGroup& tp, F* data, std::size_t n) {
  if constexpr (std::is_same_v<F, float>)
    tp_all_reduce(tp, data, n, ReduceOp::kSum);
  else  // the group's half format is F's (the chunk sets it): the ledger counts 2 bytes an element
    tp_all_reduce_half(tp, reinterpret_cast<std::uint16_t*>(data), n);
}

template <typename F>
void gpu_tp_block_forward(TpGroup& tp, GpuBlockActs<F>& a, const BlockView<F>& w, const F* x, GpuBlockScratch<F>& s,
                          const GpuTpDims& d, const Blas& blas) {
  const int N = d.N(), C = d.C, Cl = d.Cl();
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  cudaStream_t st = blas.stream();
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C, st);
  matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * Cl, blas);  // column-parallel: this rank's heads
  if (d.attention == AttentionKind::kFlash)
    attention_flash_forward(a.atty, a.lse, a.qkv, d.B, d.T, Cl, d.NHl(), st);
  else
    attention_forward(a.atty, a.att, a.qkv, d.B, d.T, Cl, d.NHl(), blas);
  matmul_forward(s.proj, a.atty, w.attproj_w, static_cast<const F*>(nullptr), N, Cl, C, blas);  // row: a partial sum
  gpu_tp_all_reduce(tp, s.proj, NC);                                                            // g
  add_bias(s.proj, w.attproj_b, N, C, st);
  residual_forward(a.residual2, x, s.proj, NC, st);
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b, N, C, st);
  matmul_forward(a.fch, a.ln2, w.fc_w, w.fc_b, N, C, 4 * Cl, blas);
  gelu_forward(a.fch_gelu, a.fch, static_cast<std::size_t>(N) * 4 * Cl, st);
  matmul_forward(s.proj, a.fch_gelu, w.fcproj_w, static_cast<const F*>(nullptr), N, 4 * Cl, C, blas);
  gpu_tp_all_reduce(tp, s.proj, NC);
  add_bias(s.proj, w.fcproj_b, N, C, st);
  residual_forward(a.residual3, a.residual2, s.proj, NC, st);
}

template <typename F>
void gpu_tp_block_backward(TpGroup& tp, F* dres, const BlockView<F>& g, const GpuBlockActs<F>& a, const BlockView<F>& w,
                           const F* x, GpuBlockScratch<F>& s, const GpuTpDims& d, const Blas& blas) {
  const int N = d.N(), C = d.C, Cl = d.Cl();
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  cudaStream_t st = blas.stream();
  // MLP: the row-parallel c_proj's input gradient (N, 4Cl) is local; its bias gradient, the column
  // sum of dres, is the whole one on every rank (the bias is replicated).
  matmul_backward(s.dwide, g.fcproj_w, g.fcproj_b, dres, a.fch_gelu, w.fcproj_w, N, 4 * Cl, C, blas);
  gelu_backward(s.dwide, s.dwide, a.fch, static_cast<std::size_t>(N) * 4 * Cl, st);
  matmul_backward(s.dbtc, g.fc_w, g.fc_b, s.dwide, a.ln2, w.fc_w, N, C, 4 * Cl, blas);  // partial d ln2
  gpu_tp_all_reduce(tp, s.dbtc, NC);                                                    // f's backward
  layernorm_backward(dres, g.ln2_w, g.ln2_b, s.ln_partials, s.dbtc, a.residual2, w.ln2_w, a.ln2_mean, a.ln2_rstd, N, C,
                     st);
  // Attention, the same way; d atty (N, Cl) fits in dbtc.
  matmul_backward(s.dbtc, g.attproj_w, g.attproj_b, dres, a.atty, w.attproj_w, N, Cl, C, blas);
  if (d.attention == AttentionKind::kFlash)  // d qkv (N, 3Cl) in dwide
    attention_flash_backward(s.dwide, s.dbtc, a.qkv, a.atty, a.lse, d.B, d.T, Cl, d.NHl(), st);
  else
    attention_backward(s.dwide, s.datt, s.dbtc, a.qkv, a.att, d.B, d.T, Cl, d.NHl(), blas);
  matmul_backward(s.dbtc, g.qkv_w, g.qkv_b, s.dwide, a.ln1, w.qkv_w, N, C, 3 * Cl, blas);
  gpu_tp_all_reduce(tp, s.dbtc, NC);
  layernorm_backward(dres, g.ln1_w, g.ln1_b, s.ln_partials, s.dbtc, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, N, C, st);
}

#define SCALELAB_INSTANTIATE(F)                                                                                \
  template void gpu_tp_all_reduce<F>(TpGroup&, F*, std::size_t);                                               \
  template void gpu_tp_block_forward<F>(TpGroup&, GpuBlockActs<F>&, const BlockView<F>&, const F*,             \
                                        GpuBlockScratch<F>&, const GpuTpDims&, const Blas&);                   \
  template void gpu_tp_block_backward<F>(TpGroup&, F*, const BlockView<F>&, const GpuBlockActs<F>&,            \
                                         const BlockView<F>&, const F*, GpuBlockScratch<F>&, const GpuTpDims&, \
                                         const Blas&);
SCALELAB_INSTANTIATE(float)
SCALELAB_INSTANTIATE(bf16)
SCALELAB_INSTANTIATE(fp16)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
