// Stage 07: one data-parallel rank's model under ZeRO stage 1, 2 or 3 (fp32), behind the
// trainer's TrainModel interface. Every rank runs its own rows of each batch, as in DDP (stage
// 04); what differs is what a rank keeps between steps (dist/zero_shards.hpp cuts the state):
//
//   stage  kept between steps                        moved per step (psi elements, d ranks)
//   1      params, grads; m, v of its shard          reduce-scatter grads, all-gather params
//   2      params; grads, m, v of its shard          the same; grads reduce-scattered per micro-batch
//   3      params, grads, m, v of its shard           gather params in forward and again in
//                                                    backward, reduce-scatter grads
//
// The forward and backward are the fp32 GPT's (model/gpt.hpp), run over storage this class
// provides: under stage 2 each unit's gradients (a block, the embeddings, ln_f) live in a
// working buffer from the start of its backward until its reduce-scatter has finished; under
// stage 3 each block's parameters are gathered into a working buffer just before the block
// runs (the next block's gather is started while this one computes) and freed after. The
// memory tracker sees the working buffers come and go: its current bytes between steps are the
// sharded state, its peak adds the working set.
//
// Offload (ZeRO-Offload, stages 1 and 2): the fp32 master shard, the gradient shard and AdamW's
// m and v live in a second memory space, host memory, with its own tracker (host_memory()); the
// model's memory keeps the parameters (and stage 1's whole gradient). Each unit's reduced piece
// is copied out to the host as its reduction finishes, during backward; AdamW runs on the host
// shard, which is then copied back into the model's parameters before the all-gather. Without a
// GPU both spaces are host memory: the code path, the copies and the bytes are the same, which is
// what the tests check; its speed is measured where a GPU is at hand.
//
// What this rank's optimizer updates, num_params() and master_params(), is its shard; layout()
// is the whole model's, which forward runs. Collectives go over the data-parallel group, either
// the backend's (non-blocking, so they overlap compute) or the hand-written ring (blocking).
#pragma once

#include <cstddef>
#include <deque>
#include <string>

#include "comm/communicator.hpp"
#include "dist/ddp.hpp"
#include "dist/timeline.hpp"
#include "dist/zero_shards.hpp"
#include "dist/zero_train_model.hpp"
#include "model/gpt.hpp"

namespace scalelab {

class ZeroModel final : public ZeroTrainModel {
 public:
  // stage 1, 2 or 3 over the data-parallel group `dp` (which must outlive the model).
  // offload: stages 1 and 2 only.
  ZeroModel(const GPTConfig& config, int stage, Communicator& dp, DdpOptions::Algorithm algorithm,
            MemoryTracker* tracker, bool offload = false);
  ZeroModel(const ZeroModel&) = delete;
  ZeroModel& operator=(const ZeroModel&) = delete;

  const GPTConfig& config() const override { return gpt_.config(); }
  const ParamLayout& layout() const override { return gpt_.layout(); }
  std::size_t num_params() const override { return shards_.size(); }
  const ZeroShards& shards() const override { return shards_; }

  double forward(const int* tokens, const int* targets, int B, int T) override;
  void backward(double loss_scale) override;
  void zero_grad() override;
  void set_checkpoint_policy(const CheckpointPolicy& policy) override { gpt_.set_checkpoint_policy(policy); }
  // Stage 08. Here in the header, not in zero_model.cpp, which is lab 07's file.
  void set_attention(AttentionKind kind) override { gpt_.set_attention(kind); }
  // The whole model's GPT-2 initialisation; this rank keeps what its stage keeps.
  void init_weights(std::uint64_t seed) override;
  // This rank's shard of the parameters (shards().size() values).
  const float* master_params() const override { return params_.data() + params_offset(); }
  // Collective over the group: sets this rank's shard from `values`; stages 1 and 2 then
  // all-gather the whole buffer, so every rank holds the same parameters.
  void set_master_params(const float* values) override;
  // Scale, the global norm (partial sums of squares added over the group), skip on inf/NaN,
  // clip, AdamW on this rank's shard; stages 1 and 2 then all-gather the parameters.
  StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) override;
  // Under offload the trainer's AdamW keeps m and v in host memory.
  MemoryTracker* optimizer_tracker(MemoryTracker* run_tracker) override {
    return offload_ ? &host_tracker_ : run_tracker;
  }
  std::size_t block_forward_count() const override { return gpt_.block_forward_count(); }
  std::string precision_name() const override { return "fp32"; }

  // Before a step's micro-batches: stage 1 reduce-scatters during the last backward only (the
  // gradients of the others add up in the full buffer first); stages 2 and 3 during every one.
  void begin_step(int micro_batches) override;
  // This rank's shard of the gradients (shards().size()): after the step's last backward, the
  // sum over ranks of the whole batch's gradients.
  const float* grad_shard() const { return offload_ ? host_grads_.data() : grads_.data() + grads_offset(); }
  bool offload() const { return offload_; }
  // The second memory space under offload (empty otherwise): master shard, gradient shard, m, v.
  const MemoryTracker& host_memory() const override { return host_tracker_; }
  // The whole parameter buffer (stages 1 and 2; null under stage 3).
  const float* full_params() const override { return stage_ <= 2 ? params_.data() : nullptr; }
  // The last step's compute and communication intervals.
  const Timeline& timeline() const override { return timeline_; }
  const Communicator& step_communicator() const override { return comm_; }
  ZeroStateBytes state_formula() const override {
    return offload_ ? zero_offload_device_bytes(stage_, shards_.num_params())
                    : zero_state_bytes(stage_, shards_.num_params(), shards_.size());
  }

 private:
  // A unit's gradients on their way to the owners.
  struct Reduction {
    const ZeroUnit* unit = nullptr;
    Buffer<float> grads;  // stage 2, 3: the unit's gradients (send buffer); empty under stage 1
    Buffer<float> recv;   // this rank's piece of the sum (the backend's collective)
    Request request;
    double start_us = 0;
  };
  // A block's parameters gathered from their owners (stage 3).
  struct Gathered {
    int block = -1;
    Buffer<float> weights;
    Request request;
    bool pending = false;
    double start_us = 0;
  };

  bool ring() const { return algorithm_ == DdpOptions::Algorithm::kRing; }
  void all_gather_params();  // stages 1, 2: every rank's shard into every rank's full buffer
  // This rank's shards: inside the full buffers (stages 1, 2 for parameters, 1 for gradients) or
  // the whole of the sharded ones.
  std::size_t params_offset() const { return stage_ <= 2 ? shards_.begin() : 0; }
  std::size_t grads_offset() const { return stage_ == 1 ? shards_.begin() : 0; }
  float* own_params() { return params_.data() + params_offset(); }
  // Where this rank's gradient shard is kept: in the model's memory, or the host's (offload).
  float* own_grads() { return offload_ ? host_grads_.data() : grads_.data() + grads_offset(); }
  // What AdamW updates: this rank's parameter shard, or its fp32 master copy on the host.
  float* master_shard() { return offload_ ? host_master_.data() : own_params(); }
  // Offload: the updated master shard into the model's parameters (a no-op otherwise).
  void copy_master_in();
  // Compute intervals for the timeline: collectives run inside the hooks are left out.
  void pause_compute(const char* what);
  void resume_compute();
  void on_block(int block, bool backward);
  void on_grads_ready(std::size_t offset);
  // Stage 3, just before block l runs (forward, or backward when `backward`): its parameters
  // gathered and pointed at, every other block freed, the next block's gather started.
  void gather_around_block(int l, bool backward);
  void start_gather(Gathered& g, const ZeroUnit& unit);
  void finish_gather(Gathered& g);
  void release_blocks();
  Buffer<float> gather_unit(const ZeroUnit& unit);  // blocking (the embeddings, ln_f)
  void gather_root();
  void release_root();
  // Points a view's wte and wpe at `embeddings`, its ln_f at `lnf` (the units' working buffers).
  void point_root(ParamView<float>& view, float* embeddings, float* lnf);
  // Stage 2, 3: a zeroed working buffer for unit u's gradients.
  Buffer<float> grad_buffer(const ZeroUnit& unit);
  void start_reduction(Reduction& r);
  void finish_reduction(Reduction& r);
  void finish_reductions(std::size_t keep);  // until at most `keep` are in flight

  int stage_;
  bool offload_;
  Communicator& comm_;
  DdpOptions::Algorithm algorithm_;
  MemoryTracker* tracker_;
  MemoryTracker host_tracker_;  // offload's memory space (declared before what it counts)
  ZeroShards shards_;
  // Stages 1, 2: every parameter (num_params of the model); stage 3: this rank's shard.
  Buffer<float> params_;
  // Stage 1: every gradient; stages 2, 3: this rank's shard (none under offload: it is on the host).
  Buffer<float> grads_;
  Buffer<float> host_master_, host_grads_;  // offload: this rank's shards in host memory
  GPTModel<float> gpt_;
  ParamView<float> w_, g_;  // what gpt_ reads and writes now
  // Working sets.
  Buffer<float> root_w_emb_, root_w_lnf_;  // stage 3: gathered embeddings and ln_f
  Buffer<float> root_g_emb_, root_g_lnf_;  // stages 2, 3: their gradients during backward
  Buffer<float> block_grads_;              // stages 2, 3: the gradients of the block in backward
  std::deque<Gathered> blocks_;            // stage 3: at most two (this one and the next)
  std::deque<Reduction> reductions_;       // in flight
  int backwards_left_ = 0;                 // backward passes before the communicating one
  bool communicating_ = true;              // this backward reduce-scatters
  bool in_backward_ = false;
  bool first_contribution_ = true;  // stages 2, 3: the step's first reduced gradients are copied, later ones added
  Timeline timeline_;
  double compute_from_us_ = 0;
};

}  // namespace scalelab
