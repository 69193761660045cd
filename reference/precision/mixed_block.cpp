// Stage 03: one transformer block in mixed precision. The layer calls are model/block.cpp's, on
// fp32 staging; after each call its outputs are rounded to half, because on a GPU each layer is a
// kernel that reads half tensors, computes in fp32 (tensor cores accumulate in fp32) and writes
// half tensors. The backward pass rounds the activation gradients the same way, and the
// parameter gradients are added in fp32 to the widened half gradients and rounded once per block.
// These are the model's BlockRunner functions: model/block_walk.cpp decides when each runs.
//
// Stage 08: the attention step is the one the model picked for its kind (attention_step of
// model/attention_block.hpp: naive, chunked or flash), run on the staging like every other layer
// call; its output (atty) is rounded to half as every layer output is, and naive's probabilities
// too. The log-sum-exp that chunked and flash save, lse (B,NH,T), is not rounded: it stays fp32.
// Backward recomputes every probability from it, p = exp(s - lse). bf16 keeps 8 significant bits:
// between 8 and 16 its values are 2^-4 apart, so an lse near 10 would be off by up to 2^-5 = 0.03,
// and every recomputed probability of that query by the same factor exp(0.03), up to 3%: the row
// would no longer sum to 1, an error on every row of the gradients (fp16, 8 times finer, would
// still be off by up to 0.4%). FlashAttention keeps lse in fp32 for the same reason, and the GPU
// model keeps it among its fp32 statistics. It costs NH B T floats per block slot, 4 bytes where
// half storage would take 2, against the NH B T^2 half probabilities of naive that it replaces.
#include <algorithm>
#include <cstring>

#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/matmul.hpp"
#include "model/layers/residual.hpp"
#include "model/split_backward.hpp"
#include "precision/mixed_model.hpp"

namespace scalelab {

void MixedPrecisionModel::forward_block(int l, int slot, ActPlace x) {
  const std::size_t NC = static_cast<std::size_t>(acts_.B) * acts_.T * config_.channels;
  widen(stage_.x, place(x), NC);
  widen_params(stage_.wblock, offsets_.blocks[static_cast<std::size_t>(l)], block_params_);
  block_forward_staged();
  narrow(acts_.blocks[slot], stage_.acts_base, stage_.acts_count);
  if (stage_.lse_count) std::copy_n(stage_.acts.lse, stage_.lse_count, acts_.lse[slot]);  // fp32, as computed
  if (acts_.shared_att)
    narrow(acts_.shared_att, stage_.acts.att,
           static_cast<std::size_t>(config_.num_heads) * acts_.B * acts_.T * acts_.T);
  ++block_forwards_;
}

void MixedPrecisionModel::backward_block(int l, int slot, ActPlace x) {
  const std::size_t NC = static_cast<std::size_t>(acts_.B) * acts_.T * config_.channels;
  widen(stage_.acts_base, acts_.blocks[slot], stage_.acts_count);
  if (stage_.lse_count) std::copy_n(acts_.lse[slot], stage_.lse_count, stage_.acts.lse);
  // The selective policy: the shared buffer holds this block's probabilities (the last block's
  // from forward, the others' from recompute_attention).
  if (acts_.shared_att)
    widen(stage_.acts.att, acts_.shared_att, static_cast<std::size_t>(config_.num_heads) * acts_.B * acts_.T * acts_.T);
  widen(stage_.x, place(x), NC);
  widen_params(stage_.wblock, offsets_.blocks[static_cast<std::size_t>(l)], block_params_, true);
  widen_grads(stage_.gblock, offsets_.blocks[static_cast<std::size_t>(l)], block_params_);
  block_backward_staged();
  store_grads(offsets_.blocks[static_cast<std::size_t>(l)], stage_.gblock, block_params_);
  notify_grads_ready(offsets_.blocks[static_cast<std::size_t>(l)]);  // block l's gradients are final
}

void MixedPrecisionModel::recompute_attention(int /*l*/, int slot) {
  // From the saved (half) qkv, exactly as forward did, rounded and stored as forward stored them.
  const int B = acts_.B, T = acts_.T, C = config_.channels, NH = config_.num_heads;
  const std::size_t NC = static_cast<std::size_t>(B) * T * C, att = static_cast<std::size_t>(NH) * B * T * T;
  widen(stage_.acts.qkv, acts_.blocks[slot] + (stage_.acts.qkv - stage_.acts_base), 3 * NC);
  // (naive only: check_attention_policy refuses selective with chunked and flash)
  BlockActs<float> a = stage_.acts;
  a.atty = stage_.scratch.proj;  // the output is discarded
  attention_step_.forward(a, stage_.scratch.dtt, B, T, C, NH);
  round(stage_.acts.att, att);
  narrow(acts_.shared_att, stage_.acts.att, att);
  ++attention_recomputes_;
}

void MixedPrecisionModel::keep_boundary(int s, ActPlace x) {
  const std::size_t NC = static_cast<std::size_t>(acts_.B) * acts_.T * config_.channels;
  std::memcpy(acts_.boundaries[s], place(x), NC * sizeof(std::uint16_t));
}

void MixedPrecisionModel::store_output(ActPlace x) {
  const std::size_t NC = static_cast<std::size_t>(acts_.B) * acts_.T * config_.channels;
  if (place(x) != acts_.final_input) std::memcpy(acts_.final_input, place(x), NC * sizeof(std::uint16_t));
}

void MixedPrecisionModel::block_forward_staged() {
  BlockActs<float>& a = stage_.acts;
  const BlockView<float>& w = stage_.w;
  float* proj = stage_.scratch.proj;
  const float* x = stage_.x;
  const int B = acts_.B, T = acts_.T, C = config_.channels, NH = config_.num_heads, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C);
  round(a.ln1, NC);
  round(a.ln1_mean, N);
  round(a.ln1_rstd, N);
  matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * C);
  round(a.qkv, 3 * NC);
  attention_step_.forward(a, stage_.scratch.dtt, B, T, C, NH);  // naive: att; chunked, flash: lse (kept fp32)
  round(a.atty, NC);
  if (a.att) round(a.att, static_cast<std::size_t>(NH) * N * T);
  matmul_forward(proj, a.atty, w.attproj_w, w.attproj_b, N, C, C);
  round(proj, NC);
  residual_forward(a.residual2, x, proj, NC);
  round(a.residual2, NC);
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b, N, C);
  round(a.ln2, NC);
  round(a.ln2_mean, N);
  round(a.ln2_rstd, N);
  matmul_forward(a.fch, a.ln2, w.fc_w, w.fc_b, N, C, 4 * C);
  round(a.fch, 4 * NC);
  gelu_forward(a.fch_gelu, a.fch, 4 * NC);
  round(a.fch_gelu, 4 * NC);
  matmul_forward(proj, a.fch_gelu, w.fcproj_w, w.fcproj_b, N, 4 * C, C);
  round(proj, NC);
  residual_forward(a.residual3, a.residual2, proj, NC);
  round(a.residual3, NC);
}

void MixedPrecisionModel::block_backward_staged() {
  const BlockActs<float>& a = stage_.acts;
  const BlockView<float>&w = stage_.w, &g = stage_.g;
  BlockScratch<float>& s = stage_.scratch;
  float* dres = stage_.dres;  // in: d loss / d block output; out: d loss / d block input
  const float* x = stage_.x;
  const int B = acts_.B, T = acts_.T, C = config_.channels, NH = config_.num_heads, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  matmul_backward(s.dwide, g.fcproj_w, g.fcproj_b, dres, a.fch_gelu, w.fcproj_w, N, 4 * C, C);
  round(s.dwide, 4 * NC);
  gelu_backward(s.dwide, s.dwide, a.fch, 4 * NC);
  round(s.dwide, 4 * NC);
  matmul_backward(s.dbtc, g.fc_w, g.fc_b, s.dwide, a.ln2, w.fc_w, N, C, 4 * C);
  round(s.dbtc, NC);
  layernorm_backward(dres, g.ln2_w, g.ln2_b, s.dbtc, a.residual2, w.ln2_w, a.ln2_mean, a.ln2_rstd, N, C);
  round(dres, NC);
  matmul_backward(s.dbtc, g.attproj_w, g.attproj_b, dres, a.atty, w.attproj_w, N, C, C);
  round(s.dbtc, NC);
  attention_step_.backward(s.dwide, s.dtt, s.dbtc, a, B, T, C, NH);  // dqkv (B,T,3C) in dwide
  round(s.dwide, 3 * NC);
  matmul_backward(s.dbtc, g.qkv_w, g.qkv_b, s.dwide, a.ln1, w.qkv_w, N, C, 3 * C);
  round(s.dbtc, NC);
  layernorm_backward(dres, g.ln1_w, g.ln1_b, s.dbtc, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, N, C);
  round(dres, NC);
}

// Zero-bubble (ZB-H1): block_backward_staged without the linear layers' weight and bias gradients,
// which go on the tape (model/split_backward.hpp's split, on the staging, rounded the same way).
void MixedPrecisionModel::backward_block_input(int l, int slot, const std::uint16_t* x) {
  const std::size_t NC = static_cast<std::size_t>(acts_.B) * acts_.T * config_.channels;
  const std::size_t offset = offsets_.blocks[static_cast<std::size_t>(l)];
  widen(stage_.acts_base, acts_.blocks[slot], stage_.acts_count);
  if (stage_.lse_count) std::copy_n(acts_.lse[slot], stage_.lse_count, stage_.acts.lse);
  widen(stage_.x, x, NC);
  widen_params(stage_.wblock, offset, block_params_, true);
  widen_grads(stage_.gblock, offset, block_params_);
  block_backward_input_staged(l, slot);
  // The LayerNorms' gradients rounded once; the linear layers' are as they were (exact).
  store_grads(offset, stage_.gblock, block_params_);
}

void MixedPrecisionModel::block_backward_input_staged(int l, int slot) {
  const BlockActs<float>& a = stage_.acts;
  const BlockView<float>&w = stage_.w, &g = stage_.g;
  BlockScratch<float>& s = stage_.scratch;
  float* dres = stage_.dres;
  const float* x = stage_.x;
  const int B = acts_.B, T = acts_.T, C = config_.channels, NH = config_.num_heads, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  matmul_backward_input(s.dwide, dres, w.fcproj_w, N, 4 * C, C);
  record_weight_grad(l, slot, g.fcproj_w, g.fcproj_b, dres, a.fch_gelu, N, 4 * C, C);
  round(s.dwide, 4 * NC);
  gelu_backward(s.dwide, s.dwide, a.fch, 4 * NC);
  round(s.dwide, 4 * NC);
  matmul_backward_input(s.dbtc, s.dwide, w.fc_w, N, C, 4 * C);
  record_weight_grad(l, slot, g.fc_w, g.fc_b, s.dwide, a.ln2, N, C, 4 * C);
  round(s.dbtc, NC);
  layernorm_backward(dres, g.ln2_w, g.ln2_b, s.dbtc, a.residual2, w.ln2_w, a.ln2_mean, a.ln2_rstd, N, C);
  round(dres, NC);
  matmul_backward_input(s.dbtc, dres, w.attproj_w, N, C, C);
  record_weight_grad(l, slot, g.attproj_w, g.attproj_b, dres, a.atty, N, C, C);
  round(s.dbtc, NC);
  attention_step_.backward(s.dwide, s.dtt, s.dbtc, a, B, T, C, NH);  // dqkv (B,T,3C) in dwide
  round(s.dwide, 3 * NC);
  matmul_backward_input(s.dbtc, s.dwide, w.qkv_w, N, C, 3 * C);
  record_weight_grad(l, slot, g.qkv_w, g.qkv_b, s.dwide, a.ln1, N, C, 3 * C);
  round(s.dbtc, NC);
  layernorm_backward(dres, g.ln1_w, g.ln1_b, s.dbtc, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, N, C);
  round(dres, NC);
}

}  // namespace scalelab
