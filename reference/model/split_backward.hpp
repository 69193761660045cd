// Stage 05, zero-bubble pipelines (ZB-H1, Qi et al. 2024): a block's backward split into the
// input gradient (B), which the previous pipeline stage waits for, and the weight gradients
// (W), which nobody waits for and can run later to fill the pipeline's idle time.
//
// A linear layer's backward is three independent pieces (model/layers/matmul.cpp):
//   dinp    = dout @ weight            needed now: it is the gradient that flows on
//   dweight += dout^T @ inp            can wait
//   dbias   += column sums of dout     can wait
// block_backward_input does what block_backward does, except that for each of the block's four
// linear layers it computes only dinp and records (dout copied, inp by pointer) on a tape;
// WeightGradTape::apply() later makes exactly the calls block_backward would have made, so the
// gradients come out bit for bit the same. The LayerNorm and attention gradients are done at
// once (they are small, and the LayerNorm's feed dinp). The attention step is the model's
// attention kind's (stage 08, model/attention_block.hpp), so the split works with all three.
#pragma once

#include <cstddef>
#include <vector>

#include "core/memory.hpp"
#include "model/attention_block.hpp"
#include "model/block.hpp"

namespace scalelab {

template <typename F>
class WeightGradTape {
 public:
  // Room for `elements` output-gradient values (activations memory: they are saved for W).
  void reserve(std::size_t elements, MemoryTracker* tracker);
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C) and dbias (OC) += column sums of dout (N,OC),
  // later. dout is copied now; inp must stay valid until apply().
  void record(F* dweight, F* dbias, const F* dout, const F* inp, int N, int C, int OC);
  // The recorded products in the order recorded; then the tape is empty (and its memory freed).
  void apply();
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    F* dweight;
    F* dbias;
    const F* inp;
    const F* dout;  // in douts_
    int N, C, OC;
  };
  std::vector<Entry> entries_;
  Buffer<F> douts_;
  std::size_t used_ = 0;
};

// The pieces of matmul_backward (model/layers/matmul.cpp), apart, each bit for bit as it computes
// them: dinp (N,C) = dout (N,OC) @ weight (OC,C) now; dweight (OC,C) += dout^T @ inp (N,C) and
// dbias (OC) += the column sums of dout (unless null) later.
template <typename F>
void matmul_backward_input(F* dinp, const F* dout, const F* weight, int N, int C, int OC);
template <typename F>
void matmul_backward_weight(F* dweight, F* dbias, const F* dout, const F* inp, int N, int C, int OC);
// Its bias part alone: dbias (OC) += the column sums of dout (N,OC).
template <typename F>
void matmul_backward_bias(F* dbias, const F* dout, int N, int OC);

// Elements one block records: the output gradients of qkv (3C), attn proj (C), fc (4C) and
// mlp proj (C), each over B*T positions.
std::size_t block_tape_elements(int B, int T, int C);

// block_backward (model/block.hpp) without the linear layers' weight and bias gradients, which
// go on the tape. On entry dres holds d loss / d block output; on exit d loss / d block input.
// attention_step: the attention's backward for the kind the block's forward ran
// (BlockFunctions::attention_backward).
template <typename F>
void block_backward_input(F* dres, const BlockView<F>& g, const BlockActs<F>& a, const BlockView<F>& w, const F* x,
                          BlockScratch<F>& s, int B, int T, int C, int NH, WeightGradTape<F>& tape,
                          AttentionBackwardFn<F> attention_step);
// The same with naive attention: the form before stage 08, kept so that a gpt.cpp written for it
// (lab 00's file, model/gpt.cpp) still compiles and links.
template <typename F>
void block_backward_input(F* dres, const BlockView<F>& g, const BlockActs<F>& a, const BlockView<F>& w, const F* x,
                          BlockScratch<F>& s, int B, int T, int C, int NH, WeightGradTape<F>& tape);

}  // namespace scalelab
