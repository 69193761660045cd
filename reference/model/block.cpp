// The transformer block's forward and backward, composed from the layer functions.
#include "model/block.hpp"

#include "model/layers/attention.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/matmul.hpp"
#include "model/layers/residual.hpp"

namespace scalelab {

std::size_t block_act_elements(int B, int T, int C, int NH) {
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  return 16 * BT * C + 4 * BT + static_cast<std::size_t>(NH) * BT * T;
}

template <typename F>
void block_forward(BlockActs<F>& a, const BlockView<F>& w, const F* x, BlockScratch<F>& s, int B, int T, int C,
                   int NH) {
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C);
  matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * C);
  attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
  matmul_forward(s.proj, a.atty, w.attproj_w, w.attproj_b, N, C, C);
  residual_forward(a.residual2, x, s.proj, NC);
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b, N, C);
  matmul_forward(a.fch, a.ln2, w.fc_w, w.fc_b, N, C, 4 * C);
  gelu_forward(a.fch_gelu, a.fch, 4 * NC);
  matmul_forward(s.proj, a.fch_gelu, w.fcproj_w, w.fcproj_b, N, 4 * C, C);
  residual_forward(a.residual3, a.residual2, s.proj, NC);
}

template <typename F>
void block_backward(F* dres, const BlockView<F>& g, const BlockActs<F>& a, const BlockView<F>& w, const F* x,
                    BlockScratch<F>& s, int B, int T, int C, int NH) {
  // LAB 00 BEGIN block_backward: section 4
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  // MLP branch. d(residual3)/d(mlp_proj output) is the identity, so dres is its gradient too.
  matmul_backward(s.dwide, g.fcproj_w, g.fcproj_b, dres, a.fch_gelu, w.fcproj_w, N, 4 * C, C);
  gelu_backward(s.dwide, s.dwide, a.fch, 4 * NC);
  matmul_backward(s.dbtc, g.fc_w, g.fc_b, s.dwide, a.ln2, w.fc_w, N, C, 4 * C);
  layernorm_backward(dres, g.ln2_w, g.ln2_b, s.dbtc, a.residual2, w.ln2_w, a.ln2_mean, a.ln2_rstd, N, C);
  // dres now holds d loss / d residual2. Attention branch, the same way.
  matmul_backward(s.dbtc, g.attproj_w, g.attproj_b, dres, a.atty, w.attproj_w, N, C, C);
  attention_backward(s.dwide, s.dtt, s.dbtc, a.qkv, a.att, B, T, C, NH);  // dqkv in dwide
  matmul_backward(s.dbtc, g.qkv_w, g.qkv_b, s.dwide, a.ln1, w.qkv_w, N, C, 3 * C);
  layernorm_backward(dres, g.ln1_w, g.ln1_b, s.dbtc, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, N, C);
  // LAB 00 END
}

#define SCALELAB_INSTANTIATE(F)                                                                                       \
  template void block_forward<F>(BlockActs<F>&, const BlockView<F>&, const F*, BlockScratch<F>&, int, int, int, int); \
  template void block_backward<F>(F*, const BlockView<F>&, const BlockActs<F>&, const BlockView<F>&, const F*,        \
                                  BlockScratch<F>&, int, int, int, int);
SCALELAB_INSTANTIATE(float)
SCALELAB_INSTANTIATE(double)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab
