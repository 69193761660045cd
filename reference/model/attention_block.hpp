// Stage 08: the transformer block with a choice of attention (model/layers/attention_kind.hpp).
// This is the one seam where --attention takes effect: a model asks block_functions(kind) once,
// when the kind is set, and from then on calls the block forward and backward it was given. No
// other code of the models branches on the kind.
//
//   naive    block_forward / block_backward of model/block.cpp (stage 00, lab 00's functions):
//            the block saves att (B,NH,T,T)
//   chunked  the same block with attention_chunked.hpp: saves lse (B,NH,T) instead of att
//   flash    the same block with attention_flash.hpp: saves lse (B,NH,T) instead of att
//
// Why the lse blocks live here and not in model/block.cpp: block.cpp is lab 00's file, and a
// student's submitted block.cpp must still link, so nothing may be added to it. The chunked and
// flash blocks therefore repeat the block's few layer calls around the attention (see
// attention_block.cpp).
#pragma once

#include <cstddef>

#include "core/carve.hpp"
#include "model/block.hpp"
#include "model/checkpoint_policy.hpp"
#include "model/layers/attention_kind.hpp"

namespace scalelab {

// Keys per online-softmax step of the chunked attention in the model (the kernel takes any
// chunk >= 1; 64 matches the flash tiles, so the two differ only in how a chunk is computed).
constexpr int kAttentionChunk = 64;

// The attention step of a block's backward alone: dqkv (B,T,3C) from dout (B,T,C), reading what
// the block's forward saved in `a` (att, or atty and lse) and using s.dtt as workspace. The
// zero-bubble split backward (model/split_backward.hpp) calls it between its deferred products.
template <typename F>
using AttentionBackwardFn = void (*)(F* dqkv, BlockScratch<F>& s, const F* dout, const BlockActs<F>& a, int B, int T,
                                     int C, int NH);

// What a model calls for one attention kind; the signatures are block_forward's and
// block_backward's (model/block.hpp).
template <typename F>
struct BlockFunctions {
  void (*forward)(BlockActs<F>& a, const BlockView<F>& w, const F* x, BlockScratch<F>& s, int B, int T, int C, int NH);
  void (*backward)(F* dres, const BlockView<F>& g, const BlockActs<F>& a, const BlockView<F>& w, const F* x,
                   BlockScratch<F>& s, int B, int T, int C, int NH);
  AttentionBackwardFn<F> attention_backward;
};

// The one dispatch on the attention kind.
template <typename F>
BlockFunctions<F> block_functions(AttentionKind kind);

// The attention step alone, for a block written elsewhere (the tensor-parallel block,
// dist/tp_block.cpp, runs it on its own heads). forward fills a.atty, and a.att (naive) or a.lse
// (chunked, flash), from a.qkv; backward gives dqkv (B,T,3C) from dout (B,T,C). scratch holds
// attention_scratch_elements(kind, T).
template <typename F>
struct AttentionStep {
  void (*forward)(BlockActs<F>& a, F* scratch, int B, int T, int C, int NH);
  void (*backward)(F* dqkv, F* scratch, const F* dout, const BlockActs<F>& a, int B, int T, int C, int NH);
};
template <typename F>
AttentionStep<F> attention_step(AttentionKind kind);

// Elements of one block's saved activations: 16 BTC + 4 BT + attention_activation_elems, that is
// + NH B T T for naive (block_act_elements of block.hpp) and + NH B T for chunked and flash.
std::size_t block_act_elements(int B, int T, int C, int NH, AttentionKind kind);

// Elements of the attention's backward workspace (BlockScratch::dtt): T x T for naive (one
// (batch, head) score gradient), attention_chunked_scratch_elems(kAttentionChunk) for chunked,
// attention_flash_scratch_elems(T) for flash. Chunked and flash use it in forward as well.
std::size_t attention_scratch_elements(AttentionKind kind, int T);

// The selective checkpoint policy (stage 02) drops the (B,NH,T,T) probabilities and recomputes
// them before each block's backward. Chunked and flash never store them, so the policy has
// nothing to drop there, and its recompute (attention_forward into a shared att buffer) would
// be the naive attention's. Refused rather than silently made equal to none, so that a run never
// reports a policy it did not apply: throws a ConfigError naming --checkpoint and --attention.
void check_attention_policy(AttentionKind kind, const CheckpointPolicy& policy);

// The CPU carve of one block's activations for an attention kind: assign_block_acts (block.hpp)
// with att only for naive and own_att, then lse (B,NH,T) for chunked and flash. The layout of a
// naive block is assign_block_acts's, unchanged.
template <typename F>
void assign_block_acts(BlockActs<F>& a, Carver<F>& carve, int B, int T, int C, int NH, AttentionKind kind,
                       bool own_att) {
  const bool naive = kind == AttentionKind::kNaive;
  assign_block_acts(a, carve, B, T, C, NH, naive && own_att);
  a.lse = naive ? nullptr : carve.take(static_cast<std::size_t>(attention_activation_elems(kind, B, NH, T)));
}

}  // namespace scalelab
