// One tensor-parallel transformer block: stage 00's layers with column- and row-parallel linears.
// In mixed precision (stage 03 with 06: dist/tp_mixed_model.hpp) every layer output and every
// activation gradient is rounded to half where stage 03's block rounds it (tp.round: nothing in
// fp32); the outputs of f and g are half values already, since they cross the group as half.
#include "dist/tp_block.hpp"

#include <string>

#include "core/error.hpp"
#include "dist/tp_linear.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/residual.hpp"
#include "model/split_backward.hpp"

namespace scalelab {

namespace {

// A LayerNorm's output (this rank's rows) and statistics, rounded as stage 03 rounds them.
void round_layernorm(const TpGroup& tp, float* out, float* mean, float* rstd, const TpDims& d) {
  tp.round(out, d.rows() * static_cast<std::size_t>(d.C));
  tp.round(mean, d.rows());
  tp.round(rstd, d.rows());
}

// A column-parallel layer's backward (tp_linear.hpp), whole or with its weight gradient deferred:
// the same calls, matmul_backward cut into its pieces (model/split_backward.hpp).
void column_backward(TpGroup& tp, float* dx, float* dx_full, float* dweight, float* dbias, const float* dout,
                     const float* x_full, const float* weight, int N, int C, int OC_local,
                     const DeferWeightGrad* defer) {
  if (!defer) return column_parallel_backward(tp, dx, dx_full, dweight, dbias, dout, x_full, weight, N, C, OC_local);
  matmul_backward_input(dx_full, dout, weight, N, C, OC_local);
  if (dbias) matmul_backward_bias(dbias, dout, N, OC_local);
  (*defer)(dweight, dout, x_full, N, C, OC_local);
  f_backward(tp, dx_full, dx, static_cast<std::size_t>(N), C);
}

// The same for a row-parallel layer: its bias over this rank's rows of dy, g's backward, then dx.
void row_backward(TpGroup& tp, float* dx, float* dy_full, float* dweight, float* dbias, const float* dy, const float* x,
                  const float* weight, int N, int IC_local, int OC, const DeferWeightGrad* defer) {
  if (!defer) return row_parallel_backward(tp, dx, dy_full, dweight, dbias, dy, x, weight, N, IC_local, OC);
  matmul_backward_bias(dbias, dy, static_cast<int>(tp.local_rows(static_cast<std::size_t>(N))), OC);
  g_backward(tp, dy, dy_full, static_cast<std::size_t>(N), OC);
  matmul_backward_input(dx, dy_full, weight, N, IC_local, OC);
  (*defer)(dweight, dy_full, x, N, IC_local, OC);
}

}  // namespace

TpDims tp_dims(const TpGroup& tp, const GPTConfig& config, int B, int T, AttentionKind attention) {
  const int t = tp.size();
  const std::size_t N = static_cast<std::size_t>(B) * T;
  require(!tp.sequence_parallel || N % static_cast<std::size_t>(t) == 0, "sequence_parallel",
          "--sequence-parallel splits the " + std::to_string(N) +
              " token rows of a micro-batch (B x T = " + std::to_string(B) + " x " + std::to_string(T) +
              ") over --tp " + std::to_string(t) + " ranks, and they do not divide",
          "choose a batch and sequence length whose product divides by --tp, or drop --sequence-parallel");
  return TpDims{B, T, config.channels, config.num_heads, t, tp.sequence_parallel, attention};
}

void tp_block_forward(TpGroup& tp, BlockActs<float>& a, const BlockView<float>& w, const float* x, TpBlockScratch& s,
                      const TpDims& d) {
  const int N = static_cast<int>(d.N()), Nl = static_cast<int>(d.rows()), C = d.C, Cl = d.Cl();
  const std::size_t NlC = d.rows() * static_cast<std::size_t>(C), NCl = d.N() * static_cast<std::size_t>(Cl);
  // Without sequence parallelism the LayerNorm writes straight into the saved whole input.
  float* ln1 = d.sequence_parallel ? s.ln : a.ln1;
  layernorm_forward(ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, Nl, C);
  round_layernorm(tp, ln1, a.ln1_mean, a.ln1_rstd, d);
  column_parallel_forward(tp, a.qkv, a.ln1, ln1, w.qkv_w, w.qkv_b, N, C, 3 * Cl);
  tp.round(a.qkv, 3 * NCl);
  attention_step<float>(d.attention).forward(a, s.dtt, d.B, d.T, Cl, d.NHl());  // this rank's heads only
  tp.round(a.atty, NCl);
  if (a.att) tp.round(a.att, static_cast<std::size_t>(d.NHl()) * d.N() * d.T);  // naive's probabilities
  row_parallel_forward(tp, s.proj, s.full, a.atty, w.attproj_w, w.attproj_b, N, Cl, C);
  tp.round(s.proj, NlC);
  residual_forward(a.residual2, x, s.proj, NlC);
  tp.round(a.residual2, NlC);
  float* ln2 = d.sequence_parallel ? s.ln : a.ln2;
  layernorm_forward(ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b, Nl, C);
  round_layernorm(tp, ln2, a.ln2_mean, a.ln2_rstd, d);
  column_parallel_forward(tp, a.fch, a.ln2, ln2, w.fc_w, w.fc_b, N, C, 4 * Cl);
  tp.round(a.fch, 4 * NCl);
  gelu_forward(a.fch_gelu, a.fch, d.N() * 4 * Cl);
  tp.round(a.fch_gelu, 4 * NCl);
  row_parallel_forward(tp, s.proj, s.full, a.fch_gelu, w.fcproj_w, w.fcproj_b, N, 4 * Cl, C);
  tp.round(s.proj, NlC);
  residual_forward(a.residual3, a.residual2, s.proj, NlC);
  tp.round(a.residual3, NlC);
}

void tp_block_backward(TpGroup& tp, float* dres, const BlockView<float>& g, const BlockActs<float>& a,
                       const BlockView<float>& w, const float* x, TpBlockScratch& s, const TpDims& d,
                       const DeferWeightGrad* defer) {
  const int N = static_cast<int>(d.N()), Nl = static_cast<int>(d.rows()), C = d.C, Cl = d.Cl();
  const std::size_t NlC = d.rows() * static_cast<std::size_t>(C), NCl = d.N() * static_cast<std::size_t>(Cl);
  // Whole-row buffers: without sequence parallelism the region's own buffers already hold all
  // N rows, and f's all-reduce runs in place.
  float* dy_full = d.sequence_parallel ? s.full : dres;
  float* dx_full = d.sequence_parallel ? s.full : s.dln;
  // MLP branch: d(residual3)/d(c_proj output) is the identity, so dres is its gradient too.
  row_backward(tp, s.dwide, dy_full, g.fcproj_w, g.fcproj_b, dres, a.fch_gelu, w.fcproj_w, N, 4 * Cl, C, defer);
  tp.round(s.dwide, 4 * NCl);
  gelu_backward(s.dwide, s.dwide, a.fch, d.N() * 4 * Cl);
  tp.round(s.dwide, 4 * NCl);
  column_backward(tp, s.dln, dx_full, g.fc_w, g.fc_b, s.dwide, a.ln2, w.fc_w, N, C, 4 * Cl, defer);
  layernorm_backward(dres, g.ln2_w, g.ln2_b, s.dln, a.residual2, w.ln2_w, a.ln2_mean, a.ln2_rstd, Nl, C);
  tp.round(dres, NlC);
  // Attention branch, the same way.
  row_backward(tp, s.dnarrow, dy_full, g.attproj_w, g.attproj_b, dres, a.atty, w.attproj_w, N, Cl, C, defer);
  tp.round(s.dnarrow, NCl);
  attention_step<float>(d.attention).backward(s.dwide, s.dtt, s.dnarrow, a, d.B, d.T, Cl, d.NHl());  // d qkv in dwide
  tp.round(s.dwide, 3 * NCl);
  column_backward(tp, s.dln, dx_full, g.qkv_w, g.qkv_b, s.dwide, a.ln1, w.qkv_w, N, C, 3 * Cl, defer);
  layernorm_backward(dres, g.ln1_w, g.ln1_b, s.dln, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, Nl, C);
  tp.round(dres, NlC);
}

}  // namespace scalelab
