// Stage 03: the GPT trained in mixed precision, behind the trainer's TrainModel interface.
//
//   what                       stored as                         memory category   bytes/param
//   parameters                 half (bf16 or fp16)               params            2
//   gradients                  half, accumulated across calls    grads             2
//   master weights             fp32                              optimizer         4
//   AdamW m and v              fp32 (the trainer's AdamW)        optimizer         8
//   saved activations          half                              activations       1/2 of fp32
//   lse of chunked/flash attn  fp32, (B,NH,T) per block slot      activations       (stage 08)
//
// Every layer is computed as a tensor core computes it: its half inputs are widened to fp32
// (exactly), the layer runs in fp32 (the fp32 layer functions of reference/model/layers), and
// its outputs are rounded to half at the layer boundary. Layer outputs, activation gradients
// and parameter gradients are all rounded that way. The fp32 staging buffers (one block's
// activations, one block's weights and gradients, the head) are workspace.
//
// The optimizer step (precision/mixed_step.cpp) unscales the half gradients chunk by chunk,
// skips the step on inf/NaN, updates the fp32 master weights and rounds them back to half.
// Checkpoint policies (stage 02) and gradient accumulation (stage 01) work unchanged, and so does
// the attention kind (stage 08, --attention naive|chunked|flash): the attention step of
// model/attention_block.hpp runs on the staging like every other layer, its output rounded to
// half; the log-sum-exp of chunked and flash stays fp32 (mixed_block.cpp says why).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/memory.hpp"
#include "model/attention_block.hpp"
#include "model/block.hpp"
#include "model/block_walk.hpp"
#include "model/train_model.hpp"
#include "precision/half.hpp"

namespace scalelab {

// Where the half activations live: the same pieces as Activations<F> (model/gpt.hpp). A block's
// saved tensors are one contiguous range laid out like BlockActs<float> (assign_block_acts), so
// a whole block widens to fp32 and narrows back with one conversion; only the lse of chunked and
// flash attention is kept apart, in fp32 (precision/mixed_block.cpp).
struct HalfActivations {
  int B = 0, T = 0;
  CheckpointPolicy policy;
  AttentionKind attention = AttentionKind::kNaive;
  std::uint16_t* encoded;                  // (B,T,C)
  std::vector<std::uint16_t*> blocks;      // start of each block slot (L, or one segment's worth)
  std::vector<float*> lse;                 // chunked, flash: each slot's lse (B,NH,T) in fp32; empty for naive
  std::uint16_t* shared_att = nullptr;     // (B,NH,T,T) the selective policy's shared probabilities
  std::vector<std::uint16_t*> boundaries;  // segment inputs (B,T,C); [0] is `encoded`
  std::uint16_t* final_input;              // (B,T,C)
  std::uint16_t* lnf;                      // (B,T,C)
  std::uint16_t* lnf_mean;                 // (B,T)
  std::uint16_t* lnf_rstd;                 // (B,T)
  std::uint16_t* probs;                    // (B,T,V)
  std::uint16_t* losses;                   // (B,T)
};

// The saved activations of the mixed-precision model for one batch (B, T), checkpoint policy and
// attention kind: `half` elements of 2 bytes, the fp32 model's count (activation_elements of
// model/gpt.hpp) less the lse, and `fp32` elements of 4 bytes, the lse (B,NH,T) of each block slot
// with chunked or flash attention (none with naive). With naive this is exactly half the fp32
// model's bytes; with chunked or flash each block slot holds NH B T^2 half elements less than
// naive's and NH B T fp32 elements more.
struct MixedActivationElements {
  std::size_t half = 0, fp32 = 0;
};
MixedActivationElements mixed_activation_elements(const GPTConfig& config, int B, int T, const CheckpointPolicy& policy,
                                                  AttentionKind attention);

// The blocks run through the one walk of model/block_walk.cpp; the model is its BlockRunner
// (privately: only forward and backward drive it), staging each block through fp32.
class MixedPrecisionModel final : public TrainModel, private BlockRunner {
 public:
  // Allocates half parameters and gradients (zero) and the fp32 master weights (zero).
  MixedPrecisionModel(const GPTConfig& config, HalfFormat format, MemoryTracker* tracker);

  const GPTConfig& config() const override { return config_; }
  const ParamLayout& layout() const override { return layout_; }
  std::size_t num_params() const override { return layout_.num_params(); }
  double forward(const int* tokens, const int* targets, int B, int T) override;
  void backward(double loss_scale) override;
  void zero_grad() override;
  // Selective checkpointing with chunked or flash attention is refused (check_attention_policy),
  // in either order, as the fp32 model refuses it.
  void set_checkpoint_policy(const CheckpointPolicy& policy) override {
    check_attention_policy(attention_, policy);
    policy_ = policy;
  }
  // Stage 08: the attention step the blocks run (model/attention_block.hpp), picked once here.
  // Takes effect at the next forward.
  void set_attention(AttentionKind kind) override {
    check_attention_policy(kind, policy_);
    attention_ = kind;
    attention_step_ = attention_step<float>(kind);
  }
  AttentionKind attention() const { return attention_; }
  // The fp32 GPT-2 initialisation of model/gpt.hpp into the master weights, then rounded to half.
  void init_weights(std::uint64_t seed) override;
  const float* master_params() const override { return master_.data(); }
  void set_master_params(const float* values) override;
  StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) override;
  std::size_t block_forward_count() const override { return block_forwards_; }
  std::string precision_name() const override { return half_format_name(format_); }
  // Stage 04 in mixed precision: data parallelism reduces the half gradients themselves, and is
  // told when a block's are final, at the same points as the fp32 model (GPTModel's hook).
  GradBuffer typed_grads() override {
    return {grads_.data(), format_ == HalfFormat::kBF16 ? DataType::kBFloat16 : DataType::kFloat16};
  }
  void set_grad_ready_hook(std::function<void(std::size_t)> hook) override { grad_ready_hook_ = std::move(hook); }

  HalfFormat format() const { return format_; }
  const std::uint16_t* half_params() const { return params_.data(); }
  const std::uint16_t* half_grads() const { return grads_.data(); }
  // The accumulated gradients widened to fp32 (num_params), still multiplied by the loss scale.
  std::vector<float> grads_as_float() const;
  std::size_t attention_recompute_count() const { return attention_recomputes_; }

 private:
  // fp32 staging (workspace): what one layer call reads and writes.
  struct Staging {
    BlockActs<float> acts{};     // one block's saved activations
    float* acts_base = nullptr;  // start of `acts`: the same layout as a half block slot
    std::size_t acts_count = 0;  // elements of a half block slot (without att when shared, without lse)
    std::size_t lse_count = 0;   // elements of acts.lse (chunked and flash; 0 for naive)
    std::size_t residual3_offset = 0;
    float *wblock, *gblock;     // one block's weights and gradients (block_params_ each)...
    BlockView<float> w{}, g{};  // ...as named views
    BlockScratch<float> scratch{};
    float* x;                                   // (B,T,C) a block's or ln_f's input; the encoder's output
    float *lnf, *lnf_mean, *lnf_rstd, *losses;  // (B,T,C), (B,T), (B,T), (B,T)
    float *logits, *dlogits;                    // (B,T,V): logits, then probabilities; their gradient
    float *dres, *dlnf;                         // (B,T,C) gradients of the residual stream and of ln_f's output
    float *wte, *wpe, *gwte, *gwpe;             // (V,C), (maxT,C): head weights and their gradients
    float *lnf_w, *lnf_b, *glnf_w, *glnf_b;     // (C)
  };

  void ensure_buffers(int B, int T);
  void assign_activations(int B, int T);
  std::size_t offset_of(const float* master_ptr) const { return static_cast<std::size_t>(master_ptr - master_.data()); }
  // Widen n half parameters (or gradients) starting where `master_ptr` is in the master copy.
  void widen_params(float* out, const float* master_ptr, std::size_t n) const;
  void widen_grads(float* out, const float* master_ptr, std::size_t n) const;
  // Round n fp32 gradients to half, into the gradients of the tensor at `master_ptr`.
  void store_grads(const float* master_ptr, const float* in, std::size_t n);
  // Round n fp32 values in place and store them as half at `out`: a layer boundary.
  void narrow(std::uint16_t* out, float* in, std::size_t n) const;
  void widen(float* out, const std::uint16_t* in, std::size_t n) const { half_to_float(out, in, n, format_); }
  void round(float* x, std::size_t n) const { round_to_half(x, n, format_); }

  // BlockRunner (precision/mixed_block.cpp): stage block l's inputs from half storage, compute
  // with rounding at every layer boundary, store the results back.
  int num_blocks() const override { return config_.num_layers; }
  void forward_block(int l, int slot, ActPlace x) override;
  void backward_block(int l, int slot, ActPlace x) override;
  void keep_boundary(int s, ActPlace x) override;
  void store_output(ActPlace x) override;
  void recompute_attention(int l, int slot) override;
  void block_forward_staged();
  void block_backward_staged();
  std::uint16_t* block_output(int slot) const { return acts_.blocks[slot] + stage_.residual3_offset; }
  std::uint16_t* place(ActPlace x) const {
    return x.kind == ActPlace::Kind::kBoundary ? acts_.boundaries[x.index] : block_output(x.index);
  }

  GPTConfig config_;
  ParamLayout layout_;
  HalfFormat format_;
  MemoryTracker* tracker_;
  Buffer<std::uint16_t> params_, grads_;
  Buffer<float> master_;
  ParamView<float> master_view_;  // named views into master_, and through offset_of() into the rest
  std::size_t block_params_ = 0;  // parameters of one block (contiguous in the layout)
  Buffer<std::uint16_t> act_buffer_;
  Buffer<float> lse_buffer_;    // chunked and flash: the block slots' lse, fp32 (activations)
  Buffer<float> weight_stage_;  // fp32 staging of weights and gradients (workspace, fixed size)
  Buffer<float> stage_buffer_;  // fp32 staging of activations (workspace, sized by B and T)
  Buffer<float> chunk_;         // the optimizer step's fp32 gradient chunk (workspace)
  HalfActivations acts_;
  Staging stage_;
  std::vector<int> tokens_, targets_;
  CheckpointPolicy policy_;
  AttentionKind attention_ = AttentionKind::kNaive;                                     // stage 08
  AttentionStep<float> attention_step_ = attention_step<float>(AttentionKind::kNaive);  // attention_'s
  std::size_t block_forwards_ = 0;
  std::size_t attention_recomputes_ = 0;
  std::function<void(std::size_t)> grad_ready_hook_;  // stage 04: called with the offset of final gradients
  void notify_grads_ready(const float* master_ptr) {
    if (grad_ready_hook_) grad_ready_hook_(offset_of(master_ptr));
  }
};

}  // namespace scalelab
