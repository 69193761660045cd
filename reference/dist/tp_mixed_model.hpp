// Stage 06 with stage 03: a rank's shard of the GPT under tensor parallelism, in mixed precision.
// The splits, the collectives and their places are TensorParallelModel's (dist/tp_model.hpp); the
// bytes live where stage 03 keeps them (precision/mixed_model.hpp):
//
//   what                                 stored as   bytes per parameter of the shard
//   parameters, gradients                half        2 + 2
//   master weights (or a ZeRO-1 shard)   fp32        4 (or 4/d)
//   AdamW m and v                        fp32        8 (the trainer's; or 8/d)
//   saved activations                    half        the fp32 shard's count at 2 bytes, less the
//                                                    fp32 lse of chunked and flash attention
//
// Every layer runs in fp32 on staging (one block's weights, gradients and activations at a time,
// as stage 03's model stages them): the block's half tensors are widened, tp_block_forward and
// tp_block_backward (dist/tp_block.hpp) compute with every layer output and activation gradient
// rounded to half (TpGroup::round), and the results are stored back as half. What crosses the
// group is half too (TpGroup::half): the row-parallel layers' partial sums are rounded to half and
// added in half, as a GPU's bf16 all-reduce adds them; the all-gathers and reduce-scatters of
// sequence parallelism move 2 bytes an element. The vocab-parallel cross-entropy's three
// reductions of N numbers stay fp32 (statistics, as stage 03 keeps its softmax in fp32); the
// replicated tensors' gradients under sequence parallelism are summed in half.
//
// So against the fp32 shard every collective of activations moves half the bytes, and against
// stage 03's whole model the arithmetic differs where tensor parallelism reorders sums (the
// row-parallel layers, the cross-entropy) and in the partial sums' rounding: tests/dist/
// test_tp_mixed.cpp states the tolerance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "dist/tp_block.hpp"
#include "dist/tp_in_flight.hpp"
#include "dist/tp_shard_model.hpp"
#include "model/block_walk.hpp"
#include "precision/half_weight_tape.hpp"
#include "precision/mixed_model.hpp"

namespace scalelab {

class MixedTensorParallelModel final : public TpShardModel, private BlockRunner {
 public:
  // Rank tp_comm.rank() of tp_comm.size() for storage.slice (the whole model by default), its
  // tensors split as dist/tp_layout.hpp says. storage: as stage 03's (MixedStorage): the half
  // parameters and gradients and the master weights held, the model's own or the caller's (a
  // pipeline stage's flat buffers); storage.params and storage.grads must be true.
  MixedTensorParallelModel(const GPTConfig& config, Communicator& tp_comm, bool sequence_parallel, HalfFormat format,
                           MemoryTracker* tracker, const MixedStorage& storage = {});

  const GPTConfig& config() const override { return shard_.config(); }
  const ModelSlice& slice() const override { return shard_.slice(); }
  const ParamLayout& layout() const override { return shard_.layout(); }
  std::size_t num_params() const override { return shard_.layout().num_params(); }
  const TpLayout& shard() const override { return shard_; }
  TpGroup& group() override { return tp_; }
  HalfFormat format() const { return format_; }
  DataType half_type() const;
  std::uint16_t* half_params() { return param_data_; }
  std::uint16_t* half_grads() { return grad_data_; }
  float* held_master() { return master_data_; }  // what ZeRO-1's step updates

  double forward(const int* tokens, const int* targets, int B, int T) override;
  void backward(double loss_scale) override;
  // Under sequence parallelism the replicated tensors' half gradients, added in half over the group.
  void finish_gradients() override;
  const IndexRanges& counted_elsewhere() const override { return counted_elsewhere_; }
  // With all the master weights: root's, and the half parameters rounded from them. With a shard
  // of them: the half parameters only (each replica drew its shard from the same initialisation).
  void broadcast_params(Communicator& group, int root) override;
  void zero_grad() override;
  void set_checkpoint_policy(const CheckpointPolicy& policy) override;
  void set_attention(AttentionKind kind) override;
  // The whole model's fp32 GPT-2 initialisation, this rank's part kept: the master weights held
  // and every half parameter rounded from it.
  void init_weights(std::uint64_t seed) override;
  const float* master_params() const override { return master_data_; }
  void set_master_params(const float* values) override;
  // Stage 03's step (mixed_optimizer_step) on this rank's shard, with the whole model's gradient
  // norm (the shares over the group, as TensorParallelModel's).
  StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) override;
  GradBuffer typed_grads() override { return {grad_data_, half_type()}; }
  std::size_t block_forward_count() const override { return block_forwards_; }
  std::string precision_name() const override { return half_format_name(format_); }
  // The accumulated half gradients widened to fp32 (still multiplied by the loss scale), for tests.
  std::vector<float> grads_as_float() const;

  // As a pipeline chunk (tp x pp): this rank's rows of the region, sent in half.
  std::size_t boundary_elements(int B, int T) const override;
  DataType boundary_type() const override { return half_type(); }
  float forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) override;
  const float* output() const override { return output_; }
  void backward_slice(const float* doutput, float loss_scale) override;
  // ZB-H1's split backward, as the fp32 shard's, with stage 03's half tape
  // (precision/half_weight_tape.hpp): the half gradients bit for bit those of backward_slice.
  void backward_input(const float* doutput, float loss_scale) override;
  void backward_weight() override;
  const float* input_grad() const override { return stage_.dres; }
  void stash_activations(int key) override;
  void restore_activations(int key) override;
  void release_activations() override;
  std::size_t stashed_count() const override { return in_flight_.size(); }

 private:
  // One forward's saved activations in half (and the fp32 lse of chunked and flash attention), with
  // its tokens and targets: what a pipeline keeps per micro-batch in flight. A block slot is one
  // range laid out like the fp32 staging's block (carve_tp_block_acts), so it widens and narrows
  // in one conversion.
  struct Saved {
    Buffer<std::uint16_t> buffer;
    Buffer<float> lse_buffer;
    TpDims dims;
    CheckpointPolicy policy;
    std::uint16_t* encoded = nullptr;                                        // (Nl, C)
    std::vector<std::uint16_t*> boundaries;                                  // (Nl, C) segment inputs; [0] = encoded
    std::vector<std::uint16_t*> blocks;                                      // each block slot
    std::vector<float*> lse;                                                 // chunked, flash: each slot's (B, NH/t, T)
    std::uint16_t* shared_att = nullptr;                                     // selective: (B, NH/t, T, T)
    std::uint16_t* final_input = nullptr;                                    // (Nl, C)
    std::uint16_t *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;  // (N, C), (Nl), (Nl)
    std::uint16_t *probs = nullptr, *losses = nullptr;                       // (N, Vl), (N)
    std::vector<int> tokens, targets;
    HalfWeightTape tape;  // ZB-H1: the weight gradients its backward_input deferred
  };
  // fp32 staging (workspace).
  struct Staging {
    TpDims dims;  // what it is laid out for, with `policy`
    CheckpointPolicy policy;
    BlockActs<float> acts{};     // one block slot's activations...
    float* acts_base = nullptr;  // ...starting here, laid out as a half slot...
    std::size_t acts_count = 0;  // ...of this many elements (without the shared att and the lse)
    std::size_t lse_count = 0;   // chunked, flash: elements of acts.lse
    std::size_t residual3_offset = 0;
    TpBlockScratch scratch{};
    float* x = nullptr;     // (Nl, C) a block's or ln_f's input; the embeddings' output
    float* dres = nullptr;  // (Nl, C) the residual stream's gradient
    float* out = nullptr;   // (Nl, C) output(): the blocks' output, widened
    float* lnf = nullptr;   // (N, C) ln_f's output, gathered
    float *lnf_mean = nullptr, *lnf_rstd = nullptr, *losses = nullptr;  // (Nl), (Nl), (N)
    float *logits = nullptr, *dlogits = nullptr;                        // (N, Vl)
  };

  void ensure_buffers(int B, int T);
  void ensure_staging();
  void assign_activations(Saved& s);
  void backward_pass(const float* doutput, float loss_scale, bool split);
  float head_forward(const int* targets);
  void head_backward(float loss_scale);
  std::size_t region_elements() const { return dims_.rows() * static_cast<std::size_t>(dims_.C); }
  void label(const std::string& where) { tp_.where = where; }
  void widen(float* out, const std::uint16_t* in, std::size_t n) const { half_to_float(out, in, n, format_); }
  // n fp32 values rounded in place and stored at out: a layer boundary.
  void narrow(std::uint16_t* out, float* in, std::size_t n) const;
  void widen_params(float* out, std::size_t offset, std::size_t n) const { widen(out, param_data_ + offset, n); }
  void widen_grads(float* out, std::size_t offset, std::size_t n) const { widen(out, grad_data_ + offset, n); }
  void store_grads(std::size_t offset, const float* in, std::size_t n) {
    float_to_half(grad_data_ + offset, in, n, format_);
  }

  // BlockRunner (model/block_walk.hpp).
  int num_blocks() const override { return slice().count(config()); }
  void forward_block(int block, int slot, ActPlace x) override;
  void backward_block(int block, int slot, ActPlace x) override;
  // Block l's backward from slot `slot` with input x; with `defer`, ZB-H1's input pass.
  void backward_block_at(int l, int slot, const std::uint16_t* x, const DeferWeightGrad* defer);
  void keep_boundary(int s, ActPlace x) override;
  void store_output(ActPlace x) override;
  void recompute_attention(int block, int slot) override;
  std::uint16_t* place(ActPlace x) const {
    return x.kind == ActPlace::Kind::kBoundary ? acts_.boundaries[x.index]
                                               : acts_.blocks[x.index] + stage_.residual3_offset;
  }

  TpLayout shard_;
  TpGroup tp_;
  HalfFormat format_;
  MemoryTracker* tracker_;
  std::size_t master_begin_ = 0, master_count_ = 0;  // the master weights held: [begin, begin + count)
  Buffer<std::uint16_t> own_params_, own_grads_;     // empty where the caller owns the storage
  Buffer<float> own_master_;
  std::uint16_t* param_data_ = nullptr;
  std::uint16_t* grad_data_ = nullptr;
  float* master_data_ = nullptr;
  IndexRanges counted_elsewhere_;
  // Where the tensors addressed one at a time start in the flat buffer, and one block's size
  // (a block's tensors are contiguous, every block the same).
  std::size_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  std::vector<std::size_t> block_offsets_;
  std::size_t block_params_ = 0;
  // Weight staging (workspace): one block's weights and gradients, the wte shard, wpe and ln_f.
  Buffer<float> weight_buffer_;
  BlockView<float> wblock_{}, gblock_{};
  float *wblock_base_ = nullptr, *gblock_base_ = nullptr;
  float *wte_w_ = nullptr, *wte_g_ = nullptr, *wpe_w_ = nullptr, *wpe_g_ = nullptr;
  float *lnf_w_w_ = nullptr, *lnf_b_w_ = nullptr, *lnf_w_g_ = nullptr, *lnf_b_g_ = nullptr;
  Buffer<float> step_chunk_;  // the optimizer step's fp32 gradient chunk (workspace)
  CheckpointPolicy policy_;
  AttentionKind attention_ = AttentionKind::kNaive;
  TpDims dims_;  // the last forward's
  Saved acts_;
  TpInFlight<Saved> in_flight_;
  Buffer<float> stage_buffer_;
  Staging stage_;
  const float* output_ = nullptr;
  std::size_t block_forwards_ = 0;
};

}  // namespace scalelab
