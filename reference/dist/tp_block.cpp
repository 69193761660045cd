// One tensor-parallel transformer block: stage 00's layers with column- and row-parallel linears.
#include "dist/tp_block.hpp"

#include "dist/tp_linear.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/residual.hpp"

namespace scalelab {

void tp_block_forward(TpGroup& tp, BlockActs<float>& a, const BlockView<float>& w, const float* x, TpBlockScratch& s,
                      const TpDims& d) {
  const int N = static_cast<int>(d.N()), Nl = static_cast<int>(d.rows()), C = d.C, Cl = d.Cl();
  const std::size_t NlC = d.rows() * static_cast<std::size_t>(C);
  // Without sequence parallelism the LayerNorm writes straight into the saved whole input.
  float* ln1 = d.sequence_parallel ? s.ln : a.ln1;
  layernorm_forward(ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, Nl, C);
  column_parallel_forward(tp, a.qkv, a.ln1, ln1, w.qkv_w, w.qkv_b, N, C, 3 * Cl);
  attention_step<float>(d.attention).forward(a, s.dtt, d.B, d.T, Cl, d.NHl());  // this rank's heads only
  row_parallel_forward(tp, s.proj, s.full, a.atty, w.attproj_w, w.attproj_b, N, Cl, C);
  residual_forward(a.residual2, x, s.proj, NlC);
  float* ln2 = d.sequence_parallel ? s.ln : a.ln2;
  layernorm_forward(ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b, Nl, C);
  column_parallel_forward(tp, a.fch, a.ln2, ln2, w.fc_w, w.fc_b, N, C, 4 * Cl);
  gelu_forward(a.fch_gelu, a.fch, d.N() * 4 * Cl);
  row_parallel_forward(tp, s.proj, s.full, a.fch_gelu, w.fcproj_w, w.fcproj_b, N, 4 * Cl, C);
  residual_forward(a.residual3, a.residual2, s.proj, NlC);
}

void tp_block_backward(TpGroup& tp, float* dres, const BlockView<float>& g, const BlockActs<float>& a,
                       const BlockView<float>& w, const float* x, TpBlockScratch& s, const TpDims& d) {
  const int N = static_cast<int>(d.N()), Nl = static_cast<int>(d.rows()), C = d.C, Cl = d.Cl();
  // Whole-row buffers: without sequence parallelism the region's own buffers already hold all
  // N rows, and f's all-reduce runs in place.
  float* dy_full = d.sequence_parallel ? s.full : dres;
  float* dx_full = d.sequence_parallel ? s.full : s.dln;
  // MLP branch: d(residual3)/d(c_proj output) is the identity, so dres is its gradient too.
  row_parallel_backward(tp, s.dwide, dy_full, g.fcproj_w, g.fcproj_b, dres, a.fch_gelu, w.fcproj_w, N, 4 * Cl, C);
  gelu_backward(s.dwide, s.dwide, a.fch, d.N() * 4 * Cl);
  column_parallel_backward(tp, s.dln, dx_full, g.fc_w, g.fc_b, s.dwide, a.ln2, w.fc_w, N, C, 4 * Cl);
  layernorm_backward(dres, g.ln2_w, g.ln2_b, s.dln, a.residual2, w.ln2_w, a.ln2_mean, a.ln2_rstd, Nl, C);
  // Attention branch, the same way.
  row_parallel_backward(tp, s.dnarrow, dy_full, g.attproj_w, g.attproj_b, dres, a.atty, w.attproj_w, N, Cl, C);
  attention_step<float>(d.attention).backward(s.dwide, s.dtt, s.dnarrow, a, d.B, d.T, Cl, d.NHl());  // d qkv in dwide
  column_parallel_backward(tp, s.dln, dx_full, g.qkv_w, g.qkv_b, s.dwide, a.ln1, w.qkv_w, N, C, 3 * Cl);
  layernorm_backward(dres, g.ln1_w, g.ln1_b, s.dln, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, Nl, C);
}

}  // namespace scalelab
