// The tensor-parallel block on the GPU: kernels/model/gpu_block.cpp with the rank's shapes and
// the collectives of each column -> row pair (dist/tp_block.cpp's order).
#include "kernels/dist/gpu_tp_block.hpp"

#include <cstdint>

#include "core/error.hpp"
#include "kernels/core/dtype.hpp"
#include "kernels/layers/attention.hpp"
#include "kernels/layers/attention_flash.hpp"
#include "kernels/layers/layernorm.hpp"
#include "kernels/layers/matmul.hpp"
#include "kernels/layers/residual.hpp"
#include "kernels/layers/tensor_parallel.hpp"

namespace scalelab::cuda {

namespace {

// One collective on n elements of F over the group's device communicator, in the ledger.
template <typename F>
void collective(TpGroup& tp, CommOp op, const F* send, F* recv, std::size_t n) {
  tp.ledger.push_back({op, n, tp.where, sizeof(F)});
  const DataType type = DType<F>::comm_type;
  switch (op) {
    case CommOp::kAllReduce: tp.comm->all_reduce(send, recv, n, type, ReduceOp::kSum); break;
    case CommOp::kAllGather: tp.comm->all_gather(send, recv, n, type); break;
    case CommOp::kReduceScatter: tp.comm->reduce_scatter(send, recv, n, type, ReduceOp::kSum); break;
    default: SCALELAB_CHECK(false, "not a tensor-parallel collective: ", comm_op_name(op));
  }
}

}  // namespace

template <typename F>
void gpu_f_forward(TpGroup& tp, const F* x, F* x_full, std::size_t n) {
  if (tp.sequence_parallel) return collective(tp, CommOp::kAllGather, x, x_full, n);
  SCALELAB_CHECK(x == x_full, "f forward without sequence parallelism is the identity: one tensor");
}

template <typename F>
void gpu_f_backward(TpGroup& tp, F* dx_full, F* dx, std::size_t n) {
  if (tp.sequence_parallel) return collective(tp, CommOp::kReduceScatter, dx_full, dx, n);
  SCALELAB_CHECK(dx == dx_full, "f backward without sequence parallelism sums in place: one tensor");
  collective(tp, CommOp::kAllReduce, dx_full, dx_full, n);
}

template <typename F>
void gpu_g_forward(TpGroup& tp, F* y_partial, F* y, std::size_t n) {
  gpu_f_backward(tp, y_partial, y, n);  // the same collective: a sum of partials, whole or scattered
}

template <typename F>
void gpu_g_backward(TpGroup& tp, const F* dy, F* dy_full, std::size_t n) {
  gpu_f_forward(tp, dy, dy_full, n);  // the same collective: whole rows, gathered or already there
}

template <typename F>
void gpu_tp_block_forward(TpGroup& tp, GpuBlockActs<F>& a, const BlockView<F>& w, const F* x, GpuTpBlockScratch<F>& s,
                          const TpDims& d, const Blas& blas) {
  const int N = static_cast<int>(d.N()), Nl = static_cast<int>(d.rows()), C = d.C, Cl = d.Cl();
  const std::size_t NC = d.N() * C, NlC = d.rows() * C;
  const bool sp = d.sequence_parallel;
  cudaStream_t st = blas.stream();
  F* ln1 = sp ? s.ln : a.ln1;  // this rank's rows, gathered into a.ln1 by f
  layernorm_forward(ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, Nl, C, st);
  gpu_f_forward(tp, ln1, a.ln1, NC);
  matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * Cl, blas);  // column-parallel: this rank's heads
  if (d.attention == AttentionKind::kFlash)
    attention_flash_forward(a.atty, a.lse, a.qkv, d.B, d.T, Cl, d.NHl(), st);
  else
    attention_forward(a.atty, a.att, a.qkv, d.B, d.T, Cl, d.NHl(), blas);
  F* proj = sp ? s.proj : s.full;  // the sum lands here: this rank's rows, or all in place
  matmul_forward(s.full, a.atty, w.attproj_w, static_cast<const F*>(nullptr), N, Cl, C, blas);  // row: a partial sum
  gpu_g_forward(tp, s.full, proj, NC);
  add_bias(proj, w.attproj_b, Nl, C, st);
  F* ln2 = sp ? s.ln : a.ln2;
  residual_layernorm_forward(a.residual2, ln2, a.ln2_mean, a.ln2_rstd, x, proj, w.ln2_w, w.ln2_b, Nl, C, st);
  gpu_f_forward(tp, ln2, a.ln2, NC);
  matmul_gelu_forward(a.fch_gelu, a.fch, a.ln2, w.fc_w, w.fc_b, N, C, 4 * Cl, blas);
  matmul_forward(s.full, a.fch_gelu, w.fcproj_w, static_cast<const F*>(nullptr), N, 4 * Cl, C, blas);
  gpu_g_forward(tp, s.full, proj, NC);
  add_bias(proj, w.fcproj_b, Nl, C, st);
  residual_forward(a.residual3, a.residual2, proj, NlC, st);
}

template <typename F>
void gpu_tp_block_backward(TpGroup& tp, F* dres, const BlockView<F>& g, const GpuBlockActs<F>& a, const BlockView<F>& w,
                           const F* x, GpuTpBlockScratch<F>& s, const TpDims& d, const Blas& blas) {
  const int N = static_cast<int>(d.N()), Nl = static_cast<int>(d.rows()), C = d.C, Cl = d.Cl();
  const std::size_t NC = d.N() * C;
  const bool sp = d.sequence_parallel;
  cudaStream_t st = blas.stream();
  F* dy_full = sp ? s.full : dres;  // g's backward: the whole rows of d output
  F* dln = sp ? s.dln : s.full;     // f's backward: this rank's rows of d LayerNorm output
  // MLP. The row-parallel c_proj: its bias gradient from this rank's rows of dres, then its input
  // and weight gradients from the whole rows.
  matmul_backward_bias(g.fcproj_b, dres, Nl, C, blas);
  gpu_g_backward(tp, dres, dy_full, NC);
  matmul_gelu_backward(s.dwide, g.fcproj_w, static_cast<F*>(nullptr), dy_full, a.fch_gelu, w.fcproj_w, a.fch, N, 4 * Cl,
                       C, blas);
  matmul_backward(s.full, g.fc_w, g.fc_b, s.dwide, a.ln2, w.fc_w, N, C, 4 * Cl, blas);  // partial d ln2
  gpu_f_backward(tp, s.full, dln, NC);
  layernorm_backward(dres, g.ln2_w, g.ln2_b, s.ln_partials, dln, a.residual2, w.ln2_w, a.ln2_mean, a.ln2_rstd, Nl, C,
                     st);
  // Attention, the same way.
  matmul_backward_bias(g.attproj_b, dres, Nl, C, blas);
  gpu_g_backward(tp, dres, dy_full, NC);
  matmul_backward(s.dnarrow, g.attproj_w, static_cast<F*>(nullptr), dy_full, a.atty, w.attproj_w, N, Cl, C, blas);
  if (d.attention == AttentionKind::kFlash)  // d qkv (N, 3Cl) in dwide
    attention_flash_backward(s.dwide, s.dnarrow, a.qkv, a.atty, a.lse, d.B, d.T, Cl, d.NHl(), st);
  else
    attention_backward(s.dwide, s.datt, s.dnarrow, a.qkv, a.att, d.B, d.T, Cl, d.NHl(), blas);
  matmul_backward(s.full, g.qkv_w, g.qkv_b, s.dwide, a.ln1, w.qkv_w, N, C, 3 * Cl, blas);
  gpu_f_backward(tp, s.full, dln, NC);
  layernorm_backward(dres, g.ln1_w, g.ln1_b, s.ln_partials, dln, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, Nl, C, st);
}

#define SCALELAB_INSTANTIATE(F)                                                                               \
  template void gpu_f_forward<F>(TpGroup&, const F*, F*, std::size_t);                                        \
  template void gpu_f_backward<F>(TpGroup&, F*, F*, std::size_t);                                             \
  template void gpu_g_forward<F>(TpGroup&, F*, F*, std::size_t);                                              \
  template void gpu_g_backward<F>(TpGroup&, const F*, F*, std::size_t);                                       \
  template void gpu_tp_block_forward<F>(TpGroup&, GpuBlockActs<F>&, const BlockView<F>&, const F*,            \
                                        GpuTpBlockScratch<F>&, const TpDims&, const Blas&);                   \
  template void gpu_tp_block_backward<F>(TpGroup&, F*, const BlockView<F>&, const GpuBlockActs<F>&,           \
                                         const BlockView<F>&, const F*, GpuTpBlockScratch<F>&, const TpDims&, \
                                         const Blas&);
SCALELAB_INSTANTIATE(float)
SCALELAB_INSTANTIATE(bf16)
SCALELAB_INSTANTIATE(fp16)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
