// The GPT-2 model on the CPU: embeddings, L pre-LayerNorm blocks, final LayerNorm, LM head tied
// to the token embedding, mean cross-entropy. Parameters and gradients are two flat buffers with
// the ParamLayout; the saved activations are one more, sized for the batch of the last forward.
// F is float for training and double for whole-model gradient checks.
// A model object can also hold a slice of the GPT (model/slice.hpp): a range of blocks, with or
// without the embeddings and the head, for pipeline parallelism (stage 05); slices chained by
// hand compute what the whole model computes, bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "core/memory.hpp"
#include "model/attention_block.hpp"
#include "model/block.hpp"
#include "model/block_walk.hpp"
#include "model/checkpoint_policy.hpp"
#include "model/config.hpp"
#include "model/layers/attention_kind.hpp"
#include "model/params.hpp"
#include "model/slice.hpp"
#include "model/split_backward.hpp"

namespace scalelab {

// Everything forward saves for backward, for one (B, T) and one checkpoint policy.
// Without checkpointing every block has its own BlockActs; with a segment policy (stage 02)
// only `boundaries` (segment inputs) persist and `blocks` holds one segment's worth of slots
// that are refilled by recomputation during backward; with the selective policy all blocks
// share one attention-probabilities buffer. With chunked or flash attention (stage 08) each
// block keeps lse (B,NH,T) where naive keeps att (B,NH,T,T).
template <typename F>
struct Activations {
  int B = 0, T = 0;
  CheckpointPolicy policy;
  AttentionKind attention = AttentionKind::kNaive;
  F* encoded;                        // (B,T,C)  the first block's input: the embeddings' output
                                     //          (a slice without embeddings: a copy of its input)
  std::vector<BlockActs<F>> blocks;  // L of them; one segment's worth when checkpointing
  std::vector<F*> boundaries;        // segment s's input (B,T,C); [0] is `encoded`
  F* final_input;                    // (B,T,C)  the last block's output, ln_f's input
  // The head's (null for a slice without the head):
  F* lnf = nullptr;       // (B,T,C)
  F* lnf_mean = nullptr;  // (B,T)
  F* lnf_rstd = nullptr;  // (B,T)
  F* probs = nullptr;     // (B,T,V)  softmax of the logits (computed in place)
  F* losses = nullptr;    // (B,T)
};

// The head's saved activations (after the blocks'), as every model lays them out (the fp32, the
// mixed-precision and the GPU model): values from `values`, statistics and losses from `stats`
// (the same Carver, except on the GPU, which keeps those in fp32).
template <typename Acts, typename Values, typename Stats>
void carve_head_acts(Acts& a, Values& values, Stats& stats, int B, int T, int C, int V) {
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  a.lnf = values.take(BT * C);
  a.lnf_mean = stats.take(BT);
  a.lnf_rstd = stats.take(BT);
  a.probs = values.take(BT * V);
  a.losses = stats.take(BT);
}

// Elements saved by forward without checkpointing: BTC (16L + 2) + BT (4L + 3) + L NH B T T + BTV.
std::size_t activation_elements(const GPTConfig& config, int B, int T);
// The same under a checkpoint policy (the peak, recompute buffers included).
std::size_t activation_elements(const GPTConfig& config, int B, int T, const CheckpointPolicy& policy);
// The same for a slice: its blocks, its input (B,T,C), and the head's part only with the head.
std::size_t activation_elements(const GPTConfig& config, int B, int T, const CheckpointPolicy& policy,
                                const ModelSlice& slice);
// The same for an attention kind (stage 08): each block's L NH B T T becomes L NH B T with
// chunked or flash (block_act_elements of model/attention_block.hpp). The overloads above are
// this one with naive attention. (Defined in model/gpt_attention.cpp.)
std::size_t activation_elements(const GPTConfig& config, int B, int T, const CheckpointPolicy& policy,
                                const ModelSlice& slice, AttentionKind attention);

// GPT-2 initialisation of a flat buffer laid out by `layout`: weights N(0, 0.02), residual
// projections (c_proj) N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1. Deterministic in the seed.
template <typename F>
void init_gpt2_weights(const ParamLayout& layout, int num_layers, F* params, std::uint64_t seed);
// The same values for the tensors a slice holds (slice_layout = ParamLayout(config, slice)):
// each gets what the whole model's initialisation gives it, so slices start as the whole model
// (the head's copy of wte equal to the embeddings').
template <typename F>
void init_gpt2_weights(const GPTConfig& config, const ParamLayout& slice_layout, F* params, std::uint64_t seed);

// The model implements the walk's BlockRunner (model/block_walk.hpp) privately: only its own
// forward and backward drive the walk.
template <typename F>
class GPTModel : private BlockRunner {
 public:
  // Allocates parameters (zero) and gradients (zero); call init_weights() or load weights.
  // With a slice, only the tensors of ParamLayout(config, slice) (default: the whole model).
  GPTModel(const GPTConfig& config, MemoryTracker* tracker, const ModelSlice& slice = {});
  // The same over num_params() parameters and gradients at `params` and `grads`, which the
  // caller owns (and counts): a pipeline rank's model chunks share one flat buffer (stage 05).
  // Either may be null (ZeRO, stage 07: gradients or parameters are sharded); the caller then
  // points the views at real memory with set_views() before anything reads them.
  GPTModel(const GPTConfig& config, MemoryTracker* tracker, const ModelSlice& slice, F* params, F* grads);

  const GPTConfig& config() const { return config_; }
  const ModelSlice& slice() const { return slice_; }
  const ParamLayout& layout() const { return layout_; }
  std::size_t num_params() const { return layout_.num_params(); }
  F* params() { return param_data_; }
  const F* params() const { return param_data_; }
  F* grads() { return grad_data_; }
  const F* grads() const { return grad_data_; }
  const Activations<F>& acts() const { return acts_; }
  MemoryTracker* tracker() const { return tracker_; }

  // GPT-2 initialisation: weights N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
  // biases 0, LayerNorm weights 1. Deterministic in the seed.
  void init_weights(std::uint64_t seed);

  // Runs the model on tokens (B,T) and returns the mean loss against targets (B,T).
  // Saves the activations (reallocated when B or T changes) and a copy of tokens and targets.
  F forward(const int* tokens, const int* targets, int B, int T);
  // Accumulates (+=) d(loss_scale * loss)/d params into grads(), for the last forward.
  // The whole model, or a slice with the head.
  void backward(F loss_scale = F(1));
  void zero_grad();

  // Pipeline slices. forward_slice runs the slice on its input: tokens (B,T) with the
  // embeddings, else `input` (B,T,C), the previous slice's output(). With the head it returns
  // the mean loss against targets (B,T); without, targets may be null and it returns 0.
  // forward(tokens, targets, B, T) is forward_slice(tokens, nullptr, targets, B, T).
  F forward_slice(const int* tokens, const F* input, const int* targets, int B, int T);
  // (B,T,C) the blocks' output of the last forward: the next slice's input.
  const F* output() const { return acts_.final_input; }
  // Accumulates parameter gradients for the last forward: with the head, backward(loss_scale)
  // (doutput unused); without, from doutput (B,T,C) = d loss / d output(), which the next
  // slice's input_grad() gives (loss_scale unused: doutput carries it).
  void backward_slice(const F* doutput, F loss_scale = F(1));
  // (B,T,C) d loss / d input after backward_slice of a slice without the embeddings: what the
  // previous slice's backward_slice takes. (With the embeddings: the embeddings' output's.)
  const F* input_grad() const { return dres_; }

  // Stage 05: several micro-batches in flight. The saved activations of the last forward (and
  // its tokens, targets and deferred weight gradients) move aside under a key and come back
  // before that micro-batch's backward; release frees them. Each set is its own allocation in
  // the tracker's activations, so the peak counts the sets a pipeline schedule holds at once.
  void stash_activations(int key);
  void restore_activations(int key);
  void release_activations();
  std::size_t stashed_count() const { return stash_.size(); }

  // Stage 05, zero-bubble schedules: backward split in two. backward_input is backward_slice
  // without the blocks' matrix-product weight and bias gradients, which it records (with a copy
  // of each product's output gradient) for backward_weight to add later; everything else
  // (LayerNorms, the head, the embeddings) is done at once. backward_input then backward_weight
  // give bit for bit the gradients of backward_slice. No checkpointing: the deferred products
  // read the saved activations.
  void backward_input(const F* doutput, F loss_scale = F(1));
  void backward_weight();

  // Stage 02: which activations forward keeps (default: all). Takes effect at the next forward.
  // Selective with chunked or flash attention is refused (check_attention_policy).
  void set_checkpoint_policy(const CheckpointPolicy& policy) {
    check_attention_policy(attention_, policy);
    policy_ = policy;
  }
  const CheckpointPolicy& checkpoint_policy() const { return policy_; }

  // Stage 08: which attention the blocks run (default naive). The block functions are picked
  // here, once (model/attention_block.hpp); forward, backward, the checkpoint walk's recompute
  // and the split backward all call them. Takes effect at the next forward.
  void set_attention(AttentionKind kind) {
    check_attention_policy(kind, policy_);
    attention_ = kind;
    block_fns_ = block_functions<F>(kind);
  }
  AttentionKind attention() const { return attention_; }

  // Called during backward each time a suffix of the flat gradient buffer is final: with offset
  // o, gradients [o, num_params) will not change again in this backward (ln_f first, then each
  // block from the last, then the embeddings with o = 0). Data parallelism (stage 04) starts a
  // bucket's all-reduce from here. An empty function turns it off.
  void set_grad_ready_hook(std::function<void(std::size_t)> hook) { grad_ready_hook_ = std::move(hook); }

  // Stage 07 (ZeRO): where the tensors are. A sharded model gathers a block's parameters into a
  // working buffer just before the block runs and frees them after, so the views change during a
  // step. The hook is called before each block's forward (recompute included) and backward, with
  // the block's number and whether it is the backward; it may call set_views(). The views must
  // keep this model's layout: one BlockView per block.
  const ParamView<F>& weight_views() const { return w_; }
  const ParamView<F>& grad_views() const { return g_; }
  void set_views(const ParamView<F>& weights, const ParamView<F>& grads);
  void set_block_hook(std::function<void(int block, bool backward)> hook) { block_hook_ = std::move(hook); }

  // Work counters since construction: full block forwards (recompute included) and
  // attention-only recomputes (the selective policy).
  std::size_t block_forward_count() const { return block_forwards_; }
  std::size_t attention_recompute_count() const { return attention_recomputes_; }

 private:
  void find_offsets();                         // block_offsets_ and lnf_offset_, from the layout
  static ParamView<F> unset_view(int blocks);  // null pointers, one BlockView per block
  void ensure_buffers(int B, int T);
  void assign_activations(int B, int T);
  // The blocks' backward: the plain loop of stage 00 without checkpointing (lab 00 writes it
  // here), the walk of model/block_walk.cpp under any other policy.
  void backward_blocks(const ParamView<F>& w, const ParamView<F>& g);
  // block_backward for block l (whose input was x), then the grad-ready notification.
  void block_backward_at(int l, const BlockActs<F>& a, const F* x, const ParamView<F>& w, const ParamView<F>& g);
  void before_block(int l, bool backward) {
    if (block_hook_) block_hook_(l, backward);
  }
  void notify_grads_ready(std::size_t offset) {
    if (grad_ready_hook_) grad_ready_hook_(offset);
  }

  // BlockRunner: what the walk needs (model/block_walk.hpp).
  int num_blocks() const override { return static_cast<int>(w_.blocks.size()); }
  void forward_block(int block, int slot, ActPlace x) override;
  void backward_block(int block, int slot, ActPlace x) override;
  void keep_boundary(int s, ActPlace x) override;
  void store_output(ActPlace x) override;
  void recompute_attention(int block, int slot) override;
  F* place(ActPlace x) const {
    return x.kind == ActPlace::Kind::kBoundary ? acts_.boundaries[x.index] : acts_.blocks[x.index].residual3;
  }
  std::size_t btc() const { return static_cast<std::size_t>(acts_.B) * acts_.T * config_.channels; }

  GPTConfig config_;
  ModelSlice slice_;  // num_layers resolved
  ParamLayout layout_;
  MemoryTracker* tracker_;
  Buffer<F> params_, grads_;  // empty when the caller owns the storage
  F* param_data_ = nullptr;   // params_ or the caller's
  F* grad_data_ = nullptr;    // grads_ or the caller's
  ParamView<F> w_, g_;        // named views of param_data_ and grad_data_
  Buffer<F> act_buffer_, scratch_buffer_;
  int scratch_B_ = 0, scratch_T_ = 0;  // what scratch_buffer_ is sized for
  AttentionKind scratch_attention_ = AttentionKind::kNaive;
  WeightGradTape<F> tape_;  // backward_input's deferred products
  // Stage 05: activations of micro-batches in flight, by key.
  struct SavedForward {
    Buffer<F> act_buffer;
    Activations<F> acts;
    std::vector<int> tokens, targets;
    WeightGradTape<F> tape;
  };
  std::map<int, SavedForward> stash_;
  Activations<F> acts_;
  BlockScratch<F> scratch_{};
  F* dres_ = nullptr;     // (B,T,C) gradient of the residual stream
  F* dlnf_ = nullptr;     // (B,T,C)
  F* dlogits_ = nullptr;  // (B,T,V)  (null without the head)
  std::vector<int> tokens_, targets_;
  CheckpointPolicy policy_;
  AttentionKind attention_ = AttentionKind::kNaive;                          // stage 08
  BlockFunctions<F> block_fns_ = block_functions<F>(AttentionKind::kNaive);  // attention_'s
  std::function<void(std::size_t)> grad_ready_hook_;
  std::function<void(int, bool)> block_hook_;
  std::vector<std::size_t> block_offsets_;  // flat offset of each block's first parameter
  std::size_t lnf_offset_ = 0;              // (the head's; unused without the head)
  std::size_t block_forwards_ = 0;
  std::size_t attention_recomputes_ = 0;
};

using GPT = GPTModel<float>;

}  // namespace scalelab
