// Stage 07 in mixed precision (stage 03): ZeRO stages 1, 2 and 3 over the bf16 or fp16 model,
// behind the same strategy as the fp32 ZeRO model (dist/zero_train_model.hpp).
//
//   stage  kept between steps by each of d ranks                         bytes per parameter
//   1      half params, half grads; fp32 master, m, v of its shard        4 + 12/d
//   2      half params; half grads, fp32 master, m, v of its shard        2 + 14/d
//   3      of its shard only: half params, half grads, fp32 master, m, v  16/d
//
// The forward and backward are MixedPrecisionModel's (precision/mixed_model.hpp), told to keep
// only this rank's shard of the master weights; under stages 2 and 3 to put each unit's
// gradients (the embeddings, a block, ln_f) in a working buffer of this model's from the start of
// the unit's backward until its reduce-scatter has finished; and under stage 3 to read each
// unit's half parameters where this model gathered them: a block's just before it runs (the next
// block's gather started while it computes), the embeddings' and ln_f's for the whole forward
// and again for the whole backward. The gradients travel in half: the
// Communicator's bf16 and fp16 types, whose reductions add in fp32 and round each sum to half
// as NCCL does. The optimizer step unscales this rank's half gradient shard chunk by chunk,
// takes the norm over the whole model (the ranks' sums of squares added, so an inf or NaN on
// any rank skips the step on every rank), clips, updates the fp32 master shard with AdamW,
// rounds it into this rank's half parameters, and (stages 1, 2) an all-gather in half hands
// every rank the others' shards.
//
// Not built in mixed precision, and refused by the strategy: offload, and the hand-written ring
// (it adds fp32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "dist/timeline.hpp"
#include "dist/zero_shards.hpp"
#include "dist/zero_train_model.hpp"
#include "precision/mixed_model.hpp"

namespace scalelab {

class ZeroMixedModel final : public ZeroTrainModel {
 public:
  // stage 1, 2 or 3 over the data-parallel group `dp` (which must outlive the model).
  ZeroMixedModel(const GPTConfig& config, int stage, HalfFormat format, Communicator& dp, MemoryTracker* tracker);
  ZeroMixedModel(const ZeroMixedModel&) = delete;
  ZeroMixedModel& operator=(const ZeroMixedModel&) = delete;

  const GPTConfig& config() const override { return mixed_.config(); }
  const ParamLayout& layout() const override { return mixed_.layout(); }
  std::size_t num_params() const override { return shards_.size(); }  // this rank's shard

  double forward(const int* tokens, const int* targets, int B, int T) override;
  void backward(double loss_scale) override;
  void zero_grad() override;
  void set_checkpoint_policy(const CheckpointPolicy& policy) override { mixed_.set_checkpoint_policy(policy); }
  void set_attention(AttentionKind kind) override { mixed_.set_attention(kind); }
  // Every rank draws the whole model (the same seed): the same half parameters everywhere.
  void init_weights(std::uint64_t seed) override;
  // This rank's shard of the fp32 master weights.
  const float* master_params() const override { return mixed_.master_params(); }
  // Collective: sets this rank's master shard, then (stages 1, 2) all-gathers the half parameters.
  void set_master_params(const float* values) override;
  StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) override;
  std::size_t block_forward_count() const override { return mixed_.block_forward_count(); }
  std::string precision_name() const override { return mixed_.precision_name(); }

  const ZeroShards& shards() const override { return shards_; }
  void begin_step(int micro_batches) override;
  const Timeline& timeline() const override { return timeline_; }
  const MemoryTracker& host_memory() const override { return host_tracker_; }
  const float* full_params() const override { return nullptr; }  // the parameters are half
  const Communicator& step_communicator() const override { return comm_; }
  ZeroStateBytes state_formula() const override {
    return zero_mixed_state_bytes(stage_, shards_.num_params(), shards_.size());
  }
  // Every half parameter (stages 1, 2: the same on every rank between steps), or this rank's
  // shard of them (stage 3).
  const std::uint16_t* half_params() const { return stage_ <= 2 ? mixed_.half_params() : param_shard_.data(); }
  // This rank's half gradient shard (shards().size()), still multiplied by the loss scale: after
  // the step's last backward, the sum over ranks of the whole batch's gradients.
  const std::uint16_t* grad_shard() const {
    return stage_ == 1 ? mixed_.half_grads() + shards_.begin() : grad_shard_.data();
  }
  std::uint16_t* grad_shard() { return const_cast<std::uint16_t*>(std::as_const(*this).grad_shard()); }

 private:
  // A unit's half gradients on their way to the owners.
  struct Reduction {
    const ZeroUnit* unit = nullptr;
    Buffer<std::uint16_t> grads;  // stage 2: the unit's working buffer (the send buffer)
    Buffer<std::uint16_t> recv;   // this rank's piece of the sum
    Request request;
    double start_us = 0;
  };

  // A unit's parameters gathered from their owners (stage 3).
  struct Gathered {
    int block = -1;
    Buffer<std::uint16_t> weights;
    Request request;
    bool pending = false;
    double start_us = 0;
  };

  std::size_t unit_index(std::size_t offset) const;  // the unit holding element `offset`
  // Stage 3: MixedPrecisionModel's parameter source, and the gathers behind it.
  const std::uint16_t* param_place(std::size_t offset, bool block_backward);
  void gather_around_block(int l, bool backward);
  void start_gather(Gathered& g, const ZeroUnit& unit);
  void finish_gather(Gathered& g);
  void gather_root();  // the embeddings and ln_f, for a whole pass
  void release_all();  // every gathered buffer freed (after a pass)
  std::uint16_t* own_params() { return stage_ <= 2 ? mixed_.half_params() + shards_.begin() : param_shard_.data(); }
  std::uint16_t* grad_place(std::size_t offset);  // stages 2, 3: MixedPrecisionModel's gradient storage
  void on_grads_ready(std::size_t offset);
  void finish_reduction(Reduction& r);
  void finish_reductions(std::size_t keep);  // until at most `keep` are in flight
  void all_gather_params();
  void pause_compute(const char* what) { timeline_.add(what, "compute", 0, compute_from_us_, timeline_.now_us()); }
  void resume_compute() { compute_from_us_ = timeline_.now_us(); }

  int stage_;
  Communicator& comm_;
  MemoryTracker* tracker_;
  MemoryTracker host_tracker_;  // nothing is offloaded: stays empty
  ZeroShards shards_;
  // Half params (stages 1, 2: all), half grads (stage 1: all), fp32 master (this rank's shard).
  MixedPrecisionModel mixed_;
  Buffer<std::uint16_t> param_shard_;  // stage 3: this rank's half parameters
  Buffer<std::uint16_t> grad_shard_;   // stages 2, 3: this rank's half gradients
  Buffer<float> chunk_;                // the optimizer step's fp32 gradients, a chunk at a time
  // Working sets: each unit's gradients during its backward (stages 2, 3); the embeddings and
  // ln_f gathered for a pass, and at most two blocks, this one and the next (stage 3).
  std::vector<Buffer<std::uint16_t>> working_;
  Gathered root_emb_, root_lnf_;
  std::deque<Gathered> blocks_;
  std::deque<Reduction> reductions_;  // in flight
  int backwards_left_ = 0;            // backward passes before the communicating one
  bool communicating_ = true;         // this backward reduce-scatters
  bool in_backward_ = false;
  bool first_contribution_ = true;  // stages 2, 3: the step's first reduced sums are copied, later ones added
  Timeline timeline_;
  double compute_from_us_ = 0;
};

}  // namespace scalelab
