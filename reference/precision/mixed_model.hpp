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
// a pipeline stage's slice of the model (stage 05: MixedStorage::slice, forward_slice and
// backward_slice as GPTModel's, the tensors that cross to the next stage in half), and so does
// the attention kind (stage 08, --attention naive|chunked|flash): the attention step of
// model/attention_block.hpp runs on the staging like every other layer, its output rounded to
// half; the log-sum-exp of chunked and flash stays fp32 (mixed_block.cpp says why).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "comm/datatype.hpp"
#include "core/memory.hpp"
#include "model/attention_block.hpp"
#include "model/block.hpp"
#include "model/block_walk.hpp"
#include "model/slice.hpp"
#include "model/train_model.hpp"
#include "precision/half.hpp"
#include "precision/half_type.hpp"
#include "precision/half_weight_tape.hpp"

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
// The same for a slice (stage 05): its blocks, its input, and the head's part only with the head.
MixedActivationElements mixed_activation_elements(const GPTConfig& config, int B, int T, const CheckpointPolicy& policy,
                                                  AttentionKind attention, const ModelSlice& slice);

// What a MixedPrecisionModel keeps itself. By default: the half parameters, a half gradient
// buffer and the fp32 master weights of the whole model. ZeRO (stage 07,
// dist/zero_mixed_model.hpp) keeps only its shard of the master weights, under stages 2 and 3
// gives each tensor's gradients a place of its own (set_grad_storage), and under stage 3 hands
// the parameters over where they were gathered (set_param_source). A pipeline stage (stage 05,
// dist/pipeline_stage_model.hpp) holds a slice of the model, and its chunks live in the stage's
// flat buffers (the `*_data` pointers).
struct MixedStorage {
  std::size_t master_begin = 0;                           // the master weights held: [master_begin,
  std::size_t master_end = static_cast<std::size_t>(-1);  // master_end) of the flat buffer
  bool grads = true;   // false: no gradient buffer; set_grad_storage says where gradients go
  bool params = true;  // false: no half parameters; set_param_source says where they are
  ModelSlice slice;    // the blocks held, with or without the embeddings and the head (model/slice.hpp)
  // Storage the caller owns and counts: num_params() half parameters and gradients, and the
  // master weights held ([master_begin, master_end), at master_data; null when none are held).
  // The model then allocates none of its own.
  std::uint16_t* param_data = nullptr;
  std::uint16_t* grad_data = nullptr;
  float* master_data = nullptr;
};

// The blocks run through the one walk of model/block_walk.cpp; the model is its BlockRunner
// (privately: only forward and backward drive it), staging each block through fp32.
class MixedPrecisionModel final : public TrainModel, private BlockRunner {
 public:
  // Allocates half parameters and gradients (zero) and the fp32 master weights (zero): all of
  // them, or what `storage` asks for.
  MixedPrecisionModel(const GPTConfig& config, HalfFormat format, MemoryTracker* tracker,
                      const MixedStorage& storage = {});
  MixedPrecisionModel(const MixedPrecisionModel&) = delete;
  MixedPrecisionModel& operator=(const MixedPrecisionModel&) = delete;

  const ModelSlice& slice() const { return slice_; }
  // Stage 05, a slice as GPTModel's (model/gpt.hpp): forward from tokens (with the embeddings) or
  // from `input` (B,T,C), the previous slice's output: fp32 values that half holds exactly (they
  // were stored as half), kept as half. Returns the mean loss with the head, else 0.
  double forward_slice(const int* tokens, const float* input, const int* targets, int B, int T);
  // (B,T,C) the blocks' output of the last forward, widened to fp32 (exact): the next slice's input.
  const float* output();
  // With the head, from the loss (scaled by loss_scale); else from doutput (B,T,C), the next
  // slice's input_grad() (values half holds exactly).
  void backward_slice(const float* doutput, double loss_scale);
  // (B,T,C) d loss / d input after backward_slice of a slice without the embeddings, rounded to
  // half's values as every activation gradient is: what the previous slice's backward_slice takes.
  // Valid until the next forward or backward.
  const float* input_grad() const { return stage_.dres; }
  // Stage 05's zero-bubble schedule (ZB-H1), as GPTModel's split backward (model/split_backward.hpp):
  // backward_input is backward_slice without the linear layers' weight and bias gradients, which
  // it records on a tape (each product's output gradient in half, 9 B T C elements per block,
  // counted as activations; its input where the saved half activations keep it), and
  // backward_weight adds them later, each tensor's gradient widened, added to in fp32 and rounded
  // once, as backward_slice would have. Every element of the block is then rounded once per
  // micro-batch either way, so the half gradients come out bit for bit the same. Without
  // checkpointing (the activations must all be saved).
  void backward_input(const float* doutput, double loss_scale);
  void backward_weight();
  // Micro-batches in flight (stage 05), as GPTModel's: the saved activations (half, and the fp32
  // lse), tokens and targets move aside under a key and come back; each set is its own
  // allocation in the tracker's activations.
  void stash_activations(int key);
  void restore_activations(int key);
  void release_activations();
  std::size_t stashed_count() const { return stash_.size(); }

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
  // The fp32 GPT-2 initialisation of model/gpt.hpp into the master weights, then rounded to half
  // (every half parameter, also where the master weights are a shard).
  void init_weights(std::uint64_t seed) override;
  // The master weights held: all of them, or [master_begin, master_end) (MixedStorage).
  const float* master_params() const override { return master_data_; }
  // Sets the held master weights (as many values as held) and rounds them into their half
  // parameters; the other half parameters are left as they are.
  void set_master_params(const float* values) override;
  StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) override;
  std::size_t block_forward_count() const override { return block_forwards_; }
  std::string precision_name() const override { return half_format_name(format_); }
  // Stage 04 in mixed precision: data parallelism reduces the half gradients themselves, and is
  // told when a block's are final, at the same points as the fp32 model (GPTModel's hook).
  GradBuffer typed_grads() override { return {grad_data_, half_type()}; }
  void set_grad_ready_hook(std::function<void(std::size_t)> hook) override { grad_ready_hook_ = std::move(hook); }

  HalfFormat format() const { return format_; }
  DataType half_type() const { return half_data_type(format_); }
  const std::uint16_t* half_params() const { return param_data_; }
  std::uint16_t* half_params() { return param_data_; }  // ZeRO gathers shards into them
  const std::uint16_t* half_grads() const { return grad_data_; }
  std::uint16_t* half_grads() { return grad_data_; }  // null without a gradient buffer
  float* held_master() { return master_data_; }       // what ZeRO's optimizer step updates
  // Without a gradient buffer (MixedStorage::grads false): `place(offset)` returns where the half
  // gradients of the tensor starting at `offset` live (they accumulate there, as in the buffer).
  // Called when backward first reads them and again when it stores them.
  void set_grad_storage(std::function<std::uint16_t*(std::size_t offset)> place) { grad_storage_ = std::move(place); }
  // Without half parameters (MixedStorage::params false): `source(offset, block_backward)` returns
  // where the half parameters of the tensor starting at `offset` are, just before they are read:
  // a block's as the block runs (block_backward: for its backward; false for its forward, also
  // when checkpointing recomputes it), the embeddings' and ln_f's during forward and backward.
  using ParamSource = std::function<const std::uint16_t*(std::size_t offset, bool block_backward)>;
  void set_param_source(ParamSource source) { param_source_ = std::move(source); }
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

  // Where the tensors the forward and backward address one at a time start in the flat buffer
  // (those the slice holds: wte with the embeddings or the head, wpe with the embeddings, ln_f
  // with the head).
  struct TensorOffsets {
    std::size_t wte = 0, wpe = 0, lnf_w = 0, lnf_b = 0;
    std::vector<std::size_t> blocks;  // each held block's first tensor (ln_1.weight); a block is contiguous
  };
  static TensorOffsets tensor_offsets(const ParamLayout& layout, const ModelSlice& slice);

  // The fp32 staging for a batch shape, policy and attention kind; then the half activations
  // (also after they were stashed or released).
  void ensure_buffers(int B, int T);
  void ensure_staging(int B, int T);
  float head_forward(const int* targets, int N);  // the mean loss
  void head_backward(double loss_scale, int N);
  void assign_activations(int B, int T);
  // Widen n half parameters (or gradients) starting at `offset` of the flat buffer.
  void widen_params(float* out, std::size_t offset, std::size_t n, bool block_backward = false) const;
  void widen_grads(float* out, std::size_t offset, std::size_t n);
  // Round n fp32 gradients to half, into the gradients starting at `offset`.
  void store_grads(std::size_t offset, const float* in, std::size_t n);
  std::uint16_t* grad_place(std::size_t offset) { return grad_storage_ ? grad_storage_(offset) : grad_data_ + offset; }
  // Round n fp32 values in place and store them as half at `out`: a layer boundary.
  void narrow(std::uint16_t* out, float* in, std::size_t n) const;
  void widen(float* out, const std::uint16_t* in, std::size_t n) const { half_to_float(out, in, n, format_); }
  void round(float* x, std::size_t n) const { round_to_half(x, n, format_); }

  // BlockRunner (precision/mixed_block.cpp): stage block l's inputs from half storage, compute
  // with rounding at every layer boundary, store the results back.
  int num_blocks() const override { return slice_.num_layers; }
  void forward_block(int l, int slot, ActPlace x) override;
  void backward_block(int l, int slot, ActPlace x) override;
  void keep_boundary(int s, ActPlace x) override;
  void store_output(ActPlace x) override;
  void recompute_attention(int l, int slot) override;
  void block_forward_staged();
  void block_backward_staged();
  // Zero-bubble: the whole backward pass (backward_slice's, with `split` the blocks' input
  // gradients only, the linear layers' weight gradients taped), and one block's part of it.
  void backward_pass(const float* doutput, double loss_scale, bool split);
  void backward_block_input(int l, int slot, const std::uint16_t* x);
  void block_backward_input_staged(int l, int slot);
  // Records layer (dweight, dbias at these views of stage_.g) for backward_weight: dout (N,OC) fp32
  // values that half holds exactly, inp (N,C) the staged copy of a saved activation of `slot`.
  void record_weight_grad(int l, int slot, const float* dweight, const float* dbias, const float* dout,
                          const float* inp, int N, int C, int OC);
  std::uint16_t* block_output(int slot) const { return acts_.blocks[slot] + stage_.residual3_offset; }
  std::uint16_t* place(ActPlace x) const {
    return x.kind == ActPlace::Kind::kBoundary ? acts_.boundaries[x.index] : block_output(x.index);
  }

  GPTConfig config_;
  ModelSlice slice_;  // num_layers resolved
  ParamLayout layout_;
  HalfFormat format_;
  MemoryTracker* tracker_;
  std::size_t master_begin_;              // the master weights held are [master_begin_, master_begin_ + master_count_)
  Buffer<std::uint16_t> params_, grads_;  // owned storage (empty where the caller owns it or none is kept)
  Buffer<float> master_;
  std::uint16_t* param_data_;  // params_ or the caller's (null without half parameters)
  std::uint16_t* grad_data_;   // grads_ or the caller's (null without a gradient buffer)
  float* master_data_;         // master_ or the caller's
  std::size_t param_count_, grad_count_, master_count_;
  TensorOffsets offsets_;
  std::size_t block_params_ = 0;  // parameters of one block (contiguous in the layout)
  Buffer<std::uint16_t> act_buffer_;
  Buffer<float> lse_buffer_;         // chunked and flash: the block slots' lse, fp32 (activations)
  Buffer<float> weight_stage_;       // fp32 staging of weights and gradients (workspace, fixed size)
  Buffer<float> stage_buffer_;       // fp32 staging of activations (workspace, sized by B and T)
  Buffer<float> chunk_;              // the optimizer step's fp32 gradient chunk (workspace)
  int staged_B_ = 0, staged_T_ = 0;  // what stage_buffer_ is laid out for, with:
  CheckpointPolicy staged_policy_;
  AttentionKind staged_attention_ = AttentionKind::kNaive;
  HalfActivations acts_;
  Staging stage_;
  std::vector<int> tokens_, targets_;
  HalfWeightTape tape_;  // zero-bubble: the weight gradients backward_input deferred
  // Stage 05: the activations of micro-batches in flight, by key.
  struct SavedForward {
    Buffer<std::uint16_t> act_buffer;
    Buffer<float> lse_buffer;
    HalfActivations acts;
    std::vector<int> tokens, targets;
    HalfWeightTape tape;
  };
  std::map<int, SavedForward> stash_;
  CheckpointPolicy policy_;
  AttentionKind attention_ = AttentionKind::kNaive;                                     // stage 08
  AttentionStep<float> attention_step_ = attention_step<float>(AttentionKind::kNaive);  // attention_'s
  std::size_t block_forwards_ = 0;
  std::size_t attention_recomputes_ = 0;
  std::function<void(std::size_t)> grad_ready_hook_;         // stage 04: called with the offset of final gradients
  std::function<std::uint16_t*(std::size_t)> grad_storage_;  // stage 07: where gradients go (set_grad_storage)
  ParamSource param_source_;                                 // stage 07: where parameters are (set_param_source)
  void notify_grads_ready(std::size_t offset) {
    if (grad_ready_hook_) grad_ready_hook_(offset);
  }
};

// Stage 03's optimizer step (precision/mixed_step.cpp) over flat buffers: a model's own, or a
// pipeline stage's (its chunks' tensors one after the other).
struct MixedStepBuffers {
  float* master;                    // (count) fp32 master weights: updated
  std::uint16_t* half_params;       // (count) rounded from them after the update
  const std::uint16_t* half_grads;  // (count) the half gradients, still multiplied by the loss scale
  std::size_t count;
  HalfFormat format;
  float* chunk;  // (chunk_size) fp32 workspace: one range of unscaled gradients
  std::size_t chunk_size;
};
// The gradient norm of a model spread over ranks (stage 05): `share(g, offset, count)`, the sum of
// squares of the unscaled gradients g = [offset, offset + count) that this rank counts (default:
// all of them); `total(sum)`, the whole model's sum from this rank's (default: itself).
struct MixedNorm {
  std::function<double(const float* g, std::size_t offset, std::size_t count)> share;
  std::function<double(double)> total;
};
TrainModel::StepOutcome mixed_optimizer_step(AdamW& optimizer, const MixedStepBuffers& buffers, double lr,
                                             double grad_scale, double clip, const MixedNorm& norm = {});

}  // namespace scalelab
