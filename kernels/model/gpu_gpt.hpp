// The GPT-2 model on the GPU, the twin of model/gpt.hpp: embeddings, L pre-LayerNorm blocks,
// final LayerNorm, LM head tied to the token embedding, mean cross-entropy. Parameters and
// gradients are two flat device buffers with the same ParamLayout; the saved activations are
// device buffers laid out as the CPU's, counted by the same MemoryTracker under the same
// categories, so the memory report and the stage formulas apply unchanged, but for one term: the
// LM head's padding (below).
// F is the storage type: float (stages 00-02) or bf16/fp16 (stage 03, where the fp32 master
// weights live in GpuTrainModel). Arithmetic inside every kernel is fp32.
// All work runs on the model's own stream; forward() synchronises once, to return the loss.
//
// The LM head's padding. The logits (then probabilities, then their gradient) are (B,T,V) with
// rows Vp = padded_vocab() elements apart, V rounded up to a multiple of 128 (GPT-2: 50257 ->
// 50304). With V odd, cuBLAS's half-precision head ran at 12-17% of the bf16 GEMM ceiling on an
// H100: its leading dimension (the logits' rows) is misaligned, and the product has an odd
// number of columns. Aligned rows let matmul_forward/backward split the product into the first
// V rounded down to 8 columns and the rest (kernels/layers/matmul.cu). Only the first V columns
// of a row are ever written or read: the parameters (wte stays (V,C)), gradients, checkpoints
// and the loss are those of the unpadded model.
// The padding, B T (Vp - V) elements of F, is counted under kActivations: it is part of the
// probs buffer that forward saves for backward, allocated and freed with the other activations,
// and it grows with B and T as they do. So the GPU's activation bytes are the CPU's formula plus
// gpu_logits_padding_elements() * sizeof(F) (and the fp32 statistics, gpu_stat_elements()).
//
// Stage 05: a GpuGPT can hold a slice of the model (GpuOptions::slice, model/slice.hpp), as the
// CPU's GPTModel does: a range of blocks, with the embeddings on the first pipeline stage and
// ln_f and the head on the last. forward_slice/backward_slice take and give the (B,T,C)
// activations and their gradient in device memory, and each micro-batch in flight keeps its saved
// activations aside (stash_activations) until its backward, as on the CPU.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <vector>

#include "core/memory.hpp"
#include "kernels/core/blas.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/device_buffer.hpp"
#include "kernels/model/gpu_block.hpp"
#include "model/attention_block.hpp"
#include "model/block_walk.hpp"
#include "model/checkpoint_policy.hpp"
#include "model/config.hpp"
#include "model/layers/attention_kind.hpp"
#include "model/params.hpp"
#include "model/slice.hpp"

namespace scalelab::cuda {

struct GpuOptions {
  // TF32 tensor cores for fp32 matrix products: about 8x faster on an H100, but its 10-bit
  // mantissa inputs do not match an fp32 CPU reference to 1e-5. Off unless asked (benchmarks).
  bool allow_tf32 = false;
  // False: no gradient buffer of the whole model. backward() then writes each unit's gradients
  // where set_grad_storage() says (ZeRO-2 on the GPU, kernels/dist/gpu_zero_model.hpp), and
  // grads() is empty.
  bool own_grads = true;
  // False: no parameter buffer either. forward() and backward() then read each unit's parameters
  // where set_param_source() says (ZeRO-3), and params() is empty.
  bool own_params = true;
  // Stage 05: the part of the model held (default: all of it). ZeRO's hooks (own_grads and
  // own_params false) serve the whole model only.
  ModelSlice slice;
};

// Everything forward saves for backward, for one (B, T) and one checkpoint policy: the fields of
// Activations<F> (model/gpt.hpp), with the LayerNorm statistics and the per-row losses in fp32.
template <typename F>
struct GpuActivations {
  int B = 0, T = 0;
  CheckpointPolicy policy;
  F* encoded = nullptr;                 // (B,T,C)  embeddings: the first block's input
  std::vector<GpuBlockActs<F>> blocks;  // L of them; one segment's worth when checkpointing
  std::vector<F*> boundaries;           // segment s's input (B,T,C); [0] is `encoded`
  F* final_input = nullptr;             // (B,T,C)  the last block's output, ln_f's input
  F* lnf = nullptr;                     // (B,T,C)
  float* lnf_mean = nullptr;            // (B,T)
  float* lnf_rstd = nullptr;            // (B,T)
  F* probs = nullptr;                   // (B,T,V)  rows Vp apart: the logits (the CPU's probs buffer: the
                                        //          GPU recomputes the softmax in backward instead of
                                        //          saving it); backward turns them into dlogits
  float* losses = nullptr;              // (B,T)
};

// fp32 elements among the saved activations (LayerNorm statistics and losses) under a policy:
// 4 BT per block slot + 3 BT (with the head), and with flash attention NH B T more per slot (the
// log-sum-exp). The rest of activation_elements() (for the same slice and attention kind) is
// stored as F.
std::size_t gpu_stat_elements(const GPTConfig& config, int B, int T, const CheckpointPolicy& policy,
                              AttentionKind attention = AttentionKind::kNaive, const ModelSlice& slice = {});

// The attention kinds the GPU has kernels for (naive, flash; chunked is refused with a ConfigError
// naming --attention), and check_attention_policy's refusals under `policy`.
void require_gpu_attention(AttentionKind kind, const CheckpointPolicy& policy);

// The row stride of the logits on the GPU: V rounded up to a multiple of kVocabAlign.
inline constexpr int kVocabAlign = 128;
constexpr int gpu_padded_vocab(int vocab_size) { return (vocab_size + kVocabAlign - 1) / kVocabAlign * kVocabAlign; }
static_assert(gpu_padded_vocab(50257) == 50304 && gpu_padded_vocab(128) == 128);
// What the padding adds to the saved activations: B T (Vp - V) elements of F (see the header),
// on a model or slice with the head.
std::size_t gpu_logits_padding_elements(const GPTConfig& config, int B, int T);

// The blocks run through the one walk of model/block_walk.cpp; the model is its BlockRunner
// (privately: only forward and backward drive it), enqueuing each block's kernels.
template <typename F>
class GpuGPT : private BlockRunner {
 public:
  // Allocates parameters (zero) and gradients (zero) on the current device.
  GpuGPT(const GPTConfig& config, MemoryTracker* tracker, const GpuOptions& options = {});

  const GPTConfig& config() const { return config_; }
  const ModelSlice& slice() const { return slice_; }
  const ParamLayout& layout() const { return layout_; }
  std::size_t num_params() const { return layout_.num_params(); }
  int padded_vocab() const { return gpu_padded_vocab(config_.vocab_size); }  // Vp: the logits' row stride
  DeviceBuffer<F>& params() { return params_; }
  const DeviceBuffer<F>& params() const { return params_; }
  DeviceBuffer<F>& grads() { return grads_; }
  const DeviceBuffer<F>& grads() const { return grads_; }
  const GpuActivations<F>& acts() const { return acts_; }
  cudaStream_t stream() const { return stream_.get(); }

  // Mean loss of tokens (B,T) against targets (B,T), both host arrays (checked, then copied to
  // the device). Saves the activations, reallocated when B, T or the policy changes.
  double forward(const int* tokens, const int* targets, int B, int T);
  // Accumulates (+=) d(loss_scale * loss)/d params into grads(), for the last forward. Once per
  // forward: it turns the saved probabilities into the logits' gradient in place.
  void backward(float loss_scale = 1.0f);
  void zero_grad();

  // Stage 05, a slice: forward from tokens (host, with the embeddings) or `input` (B,T,C) in
  // device memory, the previous slice's output; with the head the mean loss of targets (host),
  // else 0 (and no synchronisation). forward(tokens, targets, B, T) is the whole model's.
  double forward_slice(const int* tokens, const F* input, const int* targets, int B, int T);
  // (B,T,C) on the device: the blocks' output of the last forward, the next slice's input.
  const F* output() const { return acts_.final_input; }
  // With the head: backward(loss_scale). Without: from doutput (B,T,C) on the device, d loss /
  // d output(). Then input_grad() (B,T,C) on the device holds d loss / d input (a slice without
  // the embeddings; valid until the next backward). All enqueued on stream().
  void backward_slice(const F* doutput, float loss_scale);
  const F* input_grad() const { return dres_; }
  // Micro-batches in flight: the last forward's saved activations (and its tokens and targets)
  // move aside under a key, come back before that micro-batch's backward, and are freed by
  // release_activations (or by the next forward).
  void stash_activations(int key);
  void restore_activations(int key);
  void release_activations();
  std::size_t stashed_count() const { return stash_.size(); }

  // Stage 02: every policy of model/checkpoint_policy.hpp, as the CPU model does it. Selective
  // with flash attention is refused, as on the CPU (check_attention_policy).
  void set_checkpoint_policy(const CheckpointPolicy& policy) {
    check_attention_policy(attention_, policy);
    policy_ = policy;
  }
  const CheckpointPolicy& checkpoint_policy() const { return policy_; }
  std::size_t block_forward_count() const { return block_forwards_; }
  std::size_t attention_recompute_count() const { return attention_recomputes_; }

  // Stage 08: naive (the (B,NH,T,T) probabilities saved) or flash (kernels/layers/
  // attention_flash.hpp: only the fp32 log-sum-exp saved). chunked is the CPU's teaching step
  // between the two and has no kernel: refused with a ConfigError naming --attention.
  void set_attention(AttentionKind kind);
  AttentionKind attention() const { return attention_; }

  // Stage 04: GPTModel::set_grad_ready_hook's notifications, at the same points and in the same
  // order (ln_f, each block from the last, the embeddings with offset 0). The hook runs on the
  // host right after the kernels that write gradients [offset, num_params) have been ENQUEUED on
  // stream(), not after they ran: the gradients are final in stream order. Work enqueued on
  // stream() afterwards sees them; anything that reads them from another stream must first wait
  // on an event recorded on stream() (NCCL), and the host must synchronise stream() (the
  // host-staging communicator copies on stream() and then synchronises it).
  void set_grad_ready_hook(std::function<void(std::size_t)> hook) { grad_ready_hook_ = std::move(hook); }
  // Stage 07 (ZeRO-2): where backward writes (accumulates into) each unit's gradients. place(offset)
  // is asked once per backward for each unit, by the offset of its first element (the
  // embeddings: 0; ln_f; each block), just before the unit's first gradient kernel is enqueued,
  // and returns device memory laid out as the unit's range of the flat buffer, valid until the
  // unit's grad-ready notification has been handled. The embeddings are asked at the start of
  // backward with ln_f (the LM head writes wte's gradient first) and notified last.
  void set_grad_storage(std::function<F*(std::size_t offset)> place) { grad_place_ = std::move(place); }
  // Stage 07 (ZeRO-3): where forward and backward read each unit's parameters. source(offset,
  // backward) is asked just before the unit's parameters are first read: the embeddings and ln_f
  // at the start of forward and of backward (the LM head reads wte in both), each block before it
  // runs forward (also a checkpointing recompute, backward false) and before its backward (true).
  // The memory, laid out as the unit's range of the flat buffer, must hold the parameters until
  // the unit's kernels have run (stream order: a buffer freed with cudaFreeAsync after them).
  void set_param_source(std::function<F*(std::size_t offset, bool backward)> source) {
    param_source_ = std::move(source);
  }

 private:
  void ensure_buffers(int B, int T);
  void ensure_scratch(int B, int T);
  void assign_activations(int B, int T);
  // BlockRunner: the blocks under the checkpoint policy, as the walk asks (enqueued on stream()).
  int num_blocks() const override { return slice_.num_layers; }
  void forward_block(int l, int slot, ActPlace x) override;
  void backward_block(int l, int slot, ActPlace x) override;
  void keep_boundary(int s, ActPlace x) override;
  void store_output(ActPlace x) override;
  void recompute_attention(int l, int slot) override;
  F* place(ActPlace x) const {
    return x.kind == ActPlace::Kind::kBoundary ? acts_.boundaries[x.index] : acts_.blocks[x.index].residual3;
  }
  void copy_activation(F* dst, const F* src);  // one (B,T,C) tensor, on the stream
  // The views (w_ or g_) of the unit starting at unit_offset, pointed into `place`, which is laid
  // out as the unit's range of the flat buffer (set_grad_storage, set_param_source).
  void point_unit(ParamView<F>& view, std::size_t unit_offset, F* place);
  // ZeRO-3: the embeddings' and ln_f's parameters for a pass, and a block's before it runs.
  void source_root(bool backward);
  void source_block(int l, bool backward);
  void notify_grads_ready(std::size_t offset) {
    if (grad_ready_hook_) grad_ready_hook_(offset);
  }

  GPTConfig config_;
  ModelSlice slice_;  // num_layers resolved
  ParamLayout layout_;
  MemoryTracker* tracker_;
  Stream stream_;
  Blas blas_;
  DeviceBuffer<F> params_, grads_;
  ParamView<F> w_, g_;                  // named device views of params_ and grads_
  DeviceBuffer<F> act_buffer_;          // activations stored as F
  DeviceBuffer<float> stat_buffer_;     // activations stored as fp32 (statistics, losses)
  DeviceBuffer<F> scratch_buffer_;      // workspace: block scratch, dres, dlnf
  DeviceBuffer<int> tokens_, targets_;  // (B,T) the last forward's batch (workspace)
  DeviceBuffer<float> loss_;            // (1) the mean loss (workspace)
  DeviceBuffer<float> ln_scratch_;      // the LayerNorm backward's partial sums (workspace)
  int scratch_B_ = 0, scratch_T_ = 0;   // what scratch_buffer_ is sized for
  AttentionKind scratch_attention_ = AttentionKind::kNaive;
  // Stage 05: the saved activations of micro-batches in flight, by key.
  struct SavedForward {
    DeviceBuffer<F> act_buffer;
    DeviceBuffer<float> stat_buffer;
    DeviceBuffer<int> tokens, targets;
    GpuActivations<F> acts;
    AttentionKind attention;
    bool probs_hold_dlogits;
  };
  std::map<int, SavedForward> stash_;
  GpuActivations<F> acts_;
  GpuBlockScratch<F> scratch_{};
  F* dres_ = nullptr;                // (B,T,C) gradient of the residual stream
  F* dlnf_ = nullptr;                // (B,T,C)
  bool probs_hold_dlogits_ = false;  // backward already ran for the last forward
  CheckpointPolicy policy_;
  AttentionKind attention_ = AttentionKind::kNaive;
  AttentionKind acts_attention_ = AttentionKind::kNaive;  // the kind the buffers were laid out for
  std::size_t block_forwards_ = 0;
  std::size_t attention_recomputes_ = 0;
  std::function<void(std::size_t)> grad_ready_hook_;
  std::function<F*(std::size_t)> grad_place_;
  std::function<F*(std::size_t, bool)> param_source_;
  std::vector<std::size_t> block_offsets_;  // flat offset of each block's first parameter
  std::size_t lnf_offset_ = 0;
};

}  // namespace scalelab::cuda
