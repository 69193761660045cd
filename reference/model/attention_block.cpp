// Stage 08: the block forward and backward with chunked or flash attention, and the one dispatch
// on the attention kind (model/attention_block.hpp).
//
// block_forward_lse and block_backward_lse repeat the layer calls of block_forward and
// block_backward (model/block.cpp) around the attention. They cannot share that code: block.cpp
// is lab 00's file (a student's copy replaces it, and must link as it is), so its functions
// can be neither split nor extended. The calls are the same, in the same order, so with the same
// attention the two give the same numbers; only the attention step and what it saves differ.
#include "model/attention_block.hpp"

#include "core/error.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/attention_chunked.hpp"
#include "model/layers/attention_flash.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/matmul.hpp"
#include "model/layers/residual.hpp"

namespace scalelab {

namespace {

// The attention steps, one pair per kind: out = a.atty and a.att (naive) or a.lse from a.qkv,
// and dqkv from dout. scratch is their workspace (attention_scratch_elements).
template <typename F>
struct NaiveAttention {
  static void forward(BlockActs<F>& a, F* /*scratch*/, int B, int T, int C, int NH) {
    attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
  }
  static void backward(F* dqkv, F* scratch, const F* dout, const BlockActs<F>& a, int B, int T, int C, int NH) {
    attention_backward(dqkv, scratch, dout, a.qkv, a.att, B, T, C, NH);
  }
};

template <typename F>
struct ChunkedAttention {
  static void forward(BlockActs<F>& a, F* scratch, int B, int T, int C, int NH) {
    attention_chunked_forward(a.atty, a.lse, scratch, a.qkv, B, T, C, NH, kAttentionChunk);
  }
  static void backward(F* dqkv, F* scratch, const F* dout, const BlockActs<F>& a, int B, int T, int C, int NH) {
    attention_chunked_backward(dqkv, scratch, dout, a.qkv, a.atty, a.lse, B, T, C, NH, kAttentionChunk);
  }
};

template <typename F>
struct FlashAttention {
  static void forward(BlockActs<F>& a, F* scratch, int B, int T, int C, int NH) {
    attention_flash_forward(a.atty, a.lse, scratch, a.qkv, B, T, C, NH);
  }
  static void backward(F* dqkv, F* scratch, const F* dout, const BlockActs<F>& a, int B, int T, int C, int NH) {
    attention_flash_backward(dqkv, scratch, dout, a.qkv, a.atty, a.lse, B, T, C, NH);
  }
};

// A step's backward in the split backward's signature (the block's scratch holds its workspace).
template <typename F, typename Attention>
void attention_backward_step(F* dqkv, BlockScratch<F>& s, const F* dout, const BlockActs<F>& a, int B, int T, int C,
                             int NH) {
  Attention::backward(dqkv, s.dtt, dout, a, B, T, C, NH);
}

// block_forward (model/block.cpp) with Attention's forward in place of attention_forward.
template <typename F, typename Attention>
void block_forward_lse(BlockActs<F>& a, const BlockView<F>& w, const F* x, BlockScratch<F>& s, int B, int T, int C,
                       int NH) {
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C);
  matmul_forward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * C);
  Attention::forward(a, s.dtt, B, T, C, NH);
  matmul_forward(s.proj, a.atty, w.attproj_w, w.attproj_b, N, C, C);
  residual_forward(a.residual2, x, s.proj, NC);
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b, N, C);
  matmul_forward(a.fch, a.ln2, w.fc_w, w.fc_b, N, C, 4 * C);
  gelu_forward(a.fch_gelu, a.fch, 4 * NC);
  matmul_forward(s.proj, a.fch_gelu, w.fcproj_w, w.fcproj_b, N, 4 * C, C);
  residual_forward(a.residual3, a.residual2, s.proj, NC);
}

// block_backward (model/block.cpp) with Attention's backward in place of attention_backward.
template <typename F, typename Attention>
void block_backward_lse(F* dres, const BlockView<F>& g, const BlockActs<F>& a, const BlockView<F>& w, const F* x,
                        BlockScratch<F>& s, int B, int T, int C, int NH) {
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  matmul_backward(s.dwide, g.fcproj_w, g.fcproj_b, dres, a.fch_gelu, w.fcproj_w, N, 4 * C, C);
  gelu_backward(s.dwide, s.dwide, a.fch, 4 * NC);
  matmul_backward(s.dbtc, g.fc_w, g.fc_b, s.dwide, a.ln2, w.fc_w, N, C, 4 * C);
  layernorm_backward(dres, g.ln2_w, g.ln2_b, s.dbtc, a.residual2, w.ln2_w, a.ln2_mean, a.ln2_rstd, N, C);
  matmul_backward(s.dbtc, g.attproj_w, g.attproj_b, dres, a.atty, w.attproj_w, N, C, C);
  Attention::backward(s.dwide, s.dtt, s.dbtc, a, B, T, C, NH);  // dqkv in dwide
  matmul_backward(s.dbtc, g.qkv_w, g.qkv_b, s.dwide, a.ln1, w.qkv_w, N, C, 3 * C);
  layernorm_backward(dres, g.ln1_w, g.ln1_b, s.dbtc, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, N, C);
}

template <typename F, typename Attention>
BlockFunctions<F> lse_block_functions() {
  return {&block_forward_lse<F, Attention>, &block_backward_lse<F, Attention>, &attention_backward_step<F, Attention>};
}

}  // namespace

template <typename F>
BlockFunctions<F> block_functions(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kNaive:
      return {&block_forward<F>, &block_backward<F>, &attention_backward_step<F, NaiveAttention<F>>};
    case AttentionKind::kChunked: return lse_block_functions<F, ChunkedAttention<F>>();
    case AttentionKind::kFlash: return lse_block_functions<F, FlashAttention<F>>();
  }
  SCALELAB_CHECK(false, "unknown attention kind ", static_cast<int>(kind));
  return {};
}

template BlockFunctions<float> block_functions<float>(AttentionKind);
template BlockFunctions<double> block_functions<double>(AttentionKind);

template <typename F>
AttentionStep<F> attention_step(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kNaive: return {&NaiveAttention<F>::forward, &NaiveAttention<F>::backward};
    case AttentionKind::kChunked: return {&ChunkedAttention<F>::forward, &ChunkedAttention<F>::backward};
    case AttentionKind::kFlash: return {&FlashAttention<F>::forward, &FlashAttention<F>::backward};
  }
  SCALELAB_CHECK(false, "unknown attention kind ", static_cast<int>(kind));
  return {};
}

template AttentionStep<float> attention_step<float>(AttentionKind);
template AttentionStep<double> attention_step<double>(AttentionKind);

std::size_t block_act_elements(int B, int T, int C, int NH, AttentionKind kind) {
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  return 16 * BT * C + 4 * BT + static_cast<std::size_t>(attention_activation_elems(kind, B, NH, T));
}

std::size_t attention_scratch_elements(AttentionKind kind, int T) {
  switch (kind) {
    case AttentionKind::kNaive: return static_cast<std::size_t>(T) * T;
    case AttentionKind::kChunked: return attention_chunked_scratch_elems(kAttentionChunk);
    case AttentionKind::kFlash: return attention_flash_scratch_elems(T);
  }
  return 0;
}

void check_attention_policy(AttentionKind kind, const CheckpointPolicy& policy) {
  require(kind == AttentionKind::kNaive || policy.kind != CheckpointPolicy::Kind::kSelective, "checkpoint",
          std::string("--checkpoint selective recomputes the (B,NH,T,T) attention probabilities, which --attention ") +
              attention_kind_name(kind) + " never stores (it saves only lse (B,NH,T))",
          "drop --checkpoint selective (with --attention " + std::string(attention_kind_name(kind)) +
              " there is nothing for it to drop), use --checkpoint every:K or sqrt, or --attention naive");
}

}  // namespace scalelab
