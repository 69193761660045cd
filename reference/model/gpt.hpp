// The GPT-2 model on the CPU: embeddings, L pre-LayerNorm blocks, final LayerNorm, LM head tied
// to the token embedding, mean cross-entropy. Parameters and gradients are two flat buffers with
// the ParamLayout; the saved activations are one more, sized for the batch of the last forward.
// F is float for training and double for whole-model gradient checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/memory.hpp"
#include "model/block.hpp"
#include "model/checkpoint_policy.hpp"
#include "model/config.hpp"
#include "model/params.hpp"

namespace scalelab {

// Everything forward saves for backward, for one (B, T) and one checkpoint policy.
// Without checkpointing every block has its own BlockActs; with a segment policy (stage 02)
// only `boundaries` (segment inputs) persist and `blocks` holds one segment's worth of slots
// that are refilled by recomputation during backward; with the selective policy all blocks
// share one attention-probabilities buffer.
template <typename F>
struct Activations {
  int B = 0, T = 0;
  CheckpointPolicy policy;
  F* encoded;                        // (B,T,C)  embeddings: the first block's input
  std::vector<BlockActs<F>> blocks;  // L of them; one segment's worth when checkpointing
  std::vector<F*> boundaries;        // segment s's input (B,T,C); [0] is `encoded`
  F* final_input;                    // (B,T,C)  the last block's output, ln_f's input
  F* lnf;                            // (B,T,C)
  F* lnf_mean;                       // (B,T)
  F* lnf_rstd;                       // (B,T)
  F* probs;                          // (B,T,V)  softmax of the logits (computed in place)
  F* losses;                         // (B,T)
};

// Elements saved by forward without checkpointing: BTC (16L + 2) + BT (4L + 3) + L NH B T T + BTV.
std::size_t activation_elements(const GPTConfig& config, int B, int T);
// The same under a checkpoint policy (the peak, recompute buffers included).
std::size_t activation_elements(const GPTConfig& config, int B, int T, const CheckpointPolicy& policy);

// GPT-2 initialisation of a flat buffer laid out by `layout`: weights N(0, 0.02), residual
// projections (c_proj) N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1. Deterministic in the seed.
template <typename F>
void init_gpt2_weights(const ParamLayout& layout, int num_layers, F* params, std::uint64_t seed);

template <typename F>
class GPTModel {
 public:
  // Allocates parameters (zero) and gradients (zero); call init_weights() or load weights.
  GPTModel(const GPTConfig& config, MemoryTracker* tracker);

  const GPTConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  std::size_t num_params() const { return layout_.num_params(); }
  F* params() { return params_.data(); }
  const F* params() const { return params_.data(); }
  F* grads() { return grads_.data(); }
  const F* grads() const { return grads_.data(); }
  const Activations<F>& acts() const { return acts_; }
  MemoryTracker* tracker() const { return tracker_; }

  // GPT-2 initialisation: weights N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
  // biases 0, LayerNorm weights 1. Deterministic in the seed.
  void init_weights(std::uint64_t seed);

  // Runs the model on tokens (B,T) and returns the mean loss against targets (B,T).
  // Saves the activations (reallocated when B or T changes) and a copy of tokens and targets.
  F forward(const int* tokens, const int* targets, int B, int T);
  // Accumulates (+=) d(loss_scale * loss)/d params into grads(), for the last forward.
  void backward(F loss_scale = F(1));
  void zero_grad();

  // Stage 02: which activations forward keeps (default: all). Takes effect at the next forward.
  void set_checkpoint_policy(const CheckpointPolicy& policy) { policy_ = policy; }
  const CheckpointPolicy& checkpoint_policy() const { return policy_; }

  // Called during backward each time a suffix of the flat gradient buffer is final: with offset
  // o, gradients [o, num_params) will not change again in this backward (ln_f first, then each
  // block from the last, then the embeddings with o = 0). Data parallelism (stage 04) starts a
  // bucket's all-reduce from here. An empty function turns it off.
  void set_grad_ready_hook(std::function<void(std::size_t)> hook) { grad_ready_hook_ = std::move(hook); }

  // Work counters since construction: full block forwards (recompute included) and
  // attention-only recomputes (the selective policy).
  std::size_t block_forward_count() const { return block_forwards_; }
  std::size_t attention_recompute_count() const { return attention_recomputes_; }

 private:
  void ensure_buffers(int B, int T);
  void assign_activations(int B, int T);
  // The blocks' part of forward and backward: plain (stage 00) and checkpointed (stage 02).
  void forward_blocks(const ParamView<F>& w);
  void backward_blocks(const ParamView<F>& w, const ParamView<F>& g);
  void forward_blocks_checkpointed(const ParamView<F>& w);
  // block_backward for block l (whose input was x), then the grad-ready notification.
  void block_backward_at(int l, const BlockActs<F>& a, const F* x, const ParamView<F>& w, const ParamView<F>& g);
  void notify_grads_ready(std::size_t offset) {
    if (grad_ready_hook_) grad_ready_hook_(offset);
  }
  void backward_blocks_checkpointed(const ParamView<F>& w, const ParamView<F>& g);

  GPTConfig config_;
  ParamLayout layout_;
  MemoryTracker* tracker_;
  Buffer<F> params_, grads_;
  Buffer<F> act_buffer_, scratch_buffer_;
  Activations<F> acts_;
  BlockScratch<F> scratch_{};
  F* dres_ = nullptr;  // (B,T,C) gradient of the residual stream
  F* dlnf_ = nullptr;  // (B,T,C)
  F* dlogits_ = nullptr;  // (B,T,V)
  std::vector<int> tokens_, targets_;
  CheckpointPolicy policy_;
  std::function<void(std::size_t)> grad_ready_hook_;
  std::vector<std::size_t> block_offsets_;  // flat offset of each block's first parameter
  std::size_t lnf_offset_ = 0;
  std::size_t block_forwards_ = 0;
  std::size_t attention_recomputes_ = 0;
};

using GPT = GPTModel<float>;

}  // namespace scalelab
