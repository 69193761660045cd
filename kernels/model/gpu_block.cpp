// The transformer block's forward and backward on the GPU, composed from the layer launchers.
// Line for line model/block.cpp; each call takes the stream (or the Blas context) last.
#include "kernels/model/gpu_block.hpp"

#include "kernels/core/dtype.hpp"
#include "kernels/layers/attention.hpp"
#include "kernels/layers/attention_flash.hpp"
#include "kernels/layers/layernorm.hpp"
#include "kernels/layers/matmul.hpp"
#include "kernels/layers/residual.hpp"

namespace scalelab::cuda {

std::size_t gpu_block_f_elements(int B, int T, int C, int NH, bool own_att) {
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  return 16 * BT * C + (own_att ? static_cast<std::size_t>(NH) * BT * T : 0);
}

std::size_t gpu_block_stat_elements(int B, int T) { return 4 * static_cast<std::size_t>(B) * T; }

template <typename F>
void gpu_block_forward(GpuBlockActs<F>& a, const BlockView<F>& w, const F* x, GpuBlockScratch<F>& s, int B, int T,
                       int C, int NH, AttentionKind attention, const Blas& blas) {
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  cudaStream_t st = blas.stream();
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C, st);
  matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * C, blas);
  if (attention == AttentionKind::kFlash)
    attention_flash_forward(a.atty, a.lse, a.qkv, B, T, C, NH, st);
  else
    attention_forward(a.atty, a.att, a.qkv, B, T, C, NH, blas);
  matmul_forward(s.proj, a.atty, w.attproj_w, w.attproj_b, N, C, C, blas);
  residual_layernorm_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, x, s.proj, w.ln2_w, w.ln2_b, N, C, st);
  matmul_gelu_forward(a.fch_gelu, a.fch, a.ln2, w.fc_w, w.fc_b, N, C, 4 * C, blas);  // fch = pre-activation
  matmul_forward(s.proj, a.fch_gelu, w.fcproj_w, w.fcproj_b, N, 4 * C, C, blas);
  residual_forward(a.residual3, a.residual2, s.proj, NC, st);
}

template <typename F>
void gpu_block_backward(F* dres, const BlockView<F>& g, const GpuBlockActs<F>& a, const BlockView<F>& w, const F* x,
                        GpuBlockScratch<F>& s, int B, int T, int C, int NH, AttentionKind attention, const Blas& blas) {
  const int N = B * T;
  cudaStream_t st = blas.stream();
  // MLP branch. d(residual3)/d(mlp_proj output) is the identity, so dres is its gradient too.
  // dwide = d loss / d fch: the projection's input gradient taken through the GELU.
  matmul_gelu_backward(s.dwide, g.fcproj_w, g.fcproj_b, dres, a.fch_gelu, w.fcproj_w, a.fch, N, 4 * C, C, blas);
  matmul_backward(s.dbtc, g.fc_w, g.fc_b, s.dwide, a.ln2, w.fc_w, N, C, 4 * C, blas);
  // layernorm_backward adds (+=) into dres: residual3's gradient reaches residual2 directly too.
  layernorm_backward(dres, g.ln2_w, g.ln2_b, s.ln_partials, s.dbtc, a.residual2, w.ln2_w, a.ln2_mean, a.ln2_rstd, N, C,
                     st);
  // dres now holds d loss / d residual2. Attention branch, the same way.
  matmul_backward(s.dbtc, g.attproj_w, g.attproj_b, dres, a.atty, w.attproj_w, N, C, C, blas);
  if (attention == AttentionKind::kFlash)  // dqkv (B,T,3C) in dwide
    attention_flash_backward(s.dwide, s.dbtc, a.qkv, a.atty, a.lse, B, T, C, NH, st);
  else
    attention_backward(s.dwide, s.datt, s.dbtc, a.qkv, a.att, B, T, C, NH, blas);
  matmul_backward(s.dbtc, g.qkv_w, g.qkv_b, s.dwide, a.ln1, w.qkv_w, N, C, 3 * C, blas);
  layernorm_backward(dres, g.ln1_w, g.ln1_b, s.ln_partials, s.dbtc, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, N, C, st);
}

#define SCALELAB_INSTANTIATE(F)                                                                                       \
  template void gpu_block_forward<F>(GpuBlockActs<F>&, const BlockView<F>&, const F*, GpuBlockScratch<F>&, int, int,  \
                                     int, int, AttentionKind, const Blas&);                                           \
  template void gpu_block_backward<F>(F*, const BlockView<F>&, const GpuBlockActs<F>&, const BlockView<F>&, const F*, \
                                      GpuBlockScratch<F>&, int, int, int, int, AttentionKind, const Blas&);
SCALELAB_INSTANTIATE(float)
SCALELAB_INSTANTIATE(bf16)
SCALELAB_INSTANTIATE(fp16)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
