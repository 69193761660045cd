// Stage 07 on the GPU: ZeRO stages 1, 2 and 3 for the GPU GPT (kernels/model/gpu_gpt.hpp), in
// fp32, bf16 or fp16, with the optimizer shard on the GPU or (stages 1 and 2) offloaded to host
// memory (ZeRO-Offload, Ren et al. 2021).
//
// Each rank runs its own rows of the batch, as in DDP; the shards are the CPU's
// (dist/zero_shards.hpp: BlockPartition{psi, d}), so checkpoints and the strategy's resharding
// are shared with the CPU models. A stage-1 step:
//
//   during the last micro-batch's backward, as each unit (ln_f, a block, the embeddings) is done:
//   reduce-scatter it (in the model's type) in place, non-blocking: this rank's piece becomes the
//   sum; offload: the piece is copied to the host on a copy stream as soon as it is reduced
//   norm: the shard's sum of squares on the GPU, added over the ranks (non-finite: skip)
//   AdamW on the shard                          on the GPU, or on the host under offload:
//                                               widened; AdamW on the host's fp32 master shard in
//                                               threads, slab by slab, each slab rounded to F and
//                                               copied into the parameters while the next computes
//   all-gather the parameters (in the model's type) in place
//
//   memory per rank (psi parameters, d ranks)   device                           host
//   stage 1, fp32                               4 psi + 4 psi + 8 psi/d          -
//   stage 1, bf16/fp16 (fp32 master in shard)   2 psi + 2 psi + 12 psi/d         -
//   stage 1, offload                            e psi + e psi                    16 psi/d
//   stage 2 (no offload)                        e psi + e psi/d + (8|12) psi/d   -
//   stage 2, offload                            e psi + 0 (working set only)     16 psi/d
//   (e: 4 bytes in fp32, 2 in bf16/fp16)
//
// The device side is zero_state_bytes / zero_mixed_state_bytes with the GPU's element size (under
// offload: the parameters, and under stage 1 the whole gradient, nothing else); the host side is
// zero_offload_host_bytes (the master and gradient shards in fp32, m and v in the trainer's
// AdamW, counted by host_memory()), for stages 1 and 2 alike. The update arithmetic is the
// single-GPU model's (GpuTrainModel: the same kernels, or the CPU AdamW the GPU kernel is bitwise
// equal to), so with the same summed gradients the parameters are the same bits.
//
// Stage 2 keeps no gradient buffer of the whole model: GpuGPT writes each unit's gradients into a
// working buffer this class hands it (GpuGPT::set_grad_storage), which is reduce-scattered when
// backward finishes the unit, on every micro-batch, and freed. Device grads: the working set (the
// embeddings and ln_f for the whole backward, at most two blocks) plus, on the GPU, this rank's
// gradient shard (F psi/d; a later micro-batch's sums are added to it in fp32 and rounded to F).
// Stage 2 with offload (ZeRO-Offload proper) has no device gradient shard at all: the unit is
// reduce-scattered in place in its working buffer, this rank's piece is copied to pinned host
// memory on the copy stream, and the host adds it into its fp32 gradient shard (the step's first
// micro-batch assigns it, widened from F; later ones add, in fp32, never rounded to F). So in
// bf16/fp16 with several micro-batches the offloaded sums are not the device stage 2's (which
// rounds each partial sum to F), and are not bitwise equal to them; in fp32 both add the same
// pieces in the same order, one rounding per add, and are equal. Ordering: a piece's copy is
// enqueued once the reduction's wait() returned (the sum is in device memory); an event recorded
// after the copy gates both the working buffer's free (the legacy stream waits for it) and the
// host's add (which synchronises it). Stage 3 gathers each unit's
// parameters when the model reads them; offload with stage 3 (ZeRO-Infinity) is refused on
// every device (dist/zero_strategy.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/communicator.hpp"
#include "core/memory.hpp"
#include "dist/timeline.hpp"
#include "dist/zero_shards.hpp"
#include "dist/zero_train_model.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/device_buffer.hpp"
#include "kernels/core/dtype.hpp"
#include "kernels/model/gpu_gpt.hpp"
#include "precision/half.hpp"

namespace scalelab::cuda {

// Makes the data-parallel group's device-memory communicator (host staging, or NCCL) ordered
// after the model's stream.
using DeviceCommFactory = std::function<std::unique_ptr<Communicator>(Communicator& host, cudaStream_t stream)>;

// Host memory pinned for the lifetime of this object (cudaHostRegister), so that copies to and
// from it run at full PCIe speed and asynchronously.
class PinnedRegistration {
 public:
  PinnedRegistration() = default;
  PinnedRegistration(void* ptr, std::size_t bytes);
  ~PinnedRegistration();
  PinnedRegistration(const PinnedRegistration&) = delete;
  PinnedRegistration& operator=(const PinnedRegistration&) = delete;

 private:
  void* ptr_ = nullptr;
};

template <typename F>
class GpuZeroModel final : public ZeroTrainModel {
 public:
  static constexpr bool kMixed = !std::is_same_v<F, float>;
  static constexpr HalfFormat kHalfFormat = std::is_same_v<F, fp16> ? HalfFormat::kFP16 : HalfFormat::kBF16;

  // ZeRO stage 1, 2 or 3 over the data-parallel group `dp` (host memory: the norms and flags travel
  // on it; it must outlive the model). make_comm builds its device twin for the gradients and
  // parameters. offload: stages 1 and 2.
  GpuZeroModel(const GPTConfig& config, int stage, Communicator& dp, const DeviceCommFactory& make_comm,
               MemoryTracker* tracker, bool offload);
  GpuZeroModel(const GpuZeroModel&) = delete;
  GpuZeroModel& operator=(const GpuZeroModel&) = delete;
  ~GpuZeroModel() override;

  GpuGPT<F>& gpt() { return gpt_; }
  Communicator& device_communicator() { return *dev_; }
  bool offload() const { return offload_; }

  const GPTConfig& config() const override { return gpt_.config(); }
  const ParamLayout& layout() const override { return gpt_.layout(); }
  std::size_t num_params() const override { return shards_.size(); }
  double forward(const int* tokens, const int* targets, int B, int T) override;
  void backward(double loss_scale) override;
  void zero_grad() override;
  void set_checkpoint_policy(const CheckpointPolicy& policy) override { gpt_.set_checkpoint_policy(policy); }
  void set_attention(AttentionKind kind) override { gpt_.set_attention(kind); }
  // The whole model's GPT-2 initialisation (every rank draws the same values); the shard's master.
  void init_weights(std::uint64_t seed) override;
  // A host copy of this rank's fp32 shard (the parameters in fp32, the master weights in mixed
  // precision), made on each call.
  const float* master_params() const override;
  // Collective: this rank's shard from `values` (shards().size()), then the all-gather.
  void set_master_params(const float* values) override;
  StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) override;
  // m and v: on the GPU (the trainer's AdamW mirrors them for checkpoints), or in the trainer's
  // AdamW itself, counted in host memory, under offload.
  bool owns_optimizer_state() const override { return !offload_; }
  MemoryTracker* optimizer_tracker(MemoryTracker* run_tracker) override {
    return offload_ ? &host_tracker_ : TrainModel::optimizer_tracker(run_tracker);
  }
  void download_optimizer_state(AdamW& optimizer) const override;
  void upload_optimizer_state(const AdamW& optimizer) override;
  std::size_t block_forward_count() const override { return gpt_.block_forward_count(); }
  std::string precision_name() const override { return DType<F>::name; }

  const ZeroShards& shards() const override { return shards_; }
  void begin_step(int micro_batches) override;
  const Timeline& timeline() const override { return timeline_; }
  const MemoryTracker& host_memory() const override { return host_tracker_; }
  const float* full_params() const override { return nullptr; }  // on the GPU: saved from the shards
  ZeroStateBytes state_formula() const override;
  const Communicator& step_communicator() const override { return *dev_; }

  // This rank's shard of the summed gradients after the last backward's reduce-scatter, in fp32
  // on the host (for tests): widened from F, or under stage 2 + offload the host's fp32 shard
  // itself (the micro-batches so far, added on the host).
  std::vector<float> grad_shard_to_host() const;

 private:
  // A unit's reduction, started by the grad-ready hook during the step's last backward.
  struct Reduction {
    const ZeroUnit* unit = nullptr;
    DeviceBuffer<F> grads;  // stage 2: the unit's working buffer (the send buffer; offload: the receive one too)
    DeviceBuffer<F> recv;   // stage 2, a later micro-batch: this rank's piece, added to the shard after
    Request request;
    double start_us = 0;
  };
  F* grad_place(std::size_t offset);  // stages 2, 3: GpuGPT's gradient storage for the unit at offset
  // Stage 3: a unit's parameters gathered from their owners.
  struct Gathered {
    const ZeroUnit* unit = nullptr;
    DeviceBuffer<F> weights;
    Request request;
    bool pending = false;
    double start_us = 0;
  };
  F* param_place(std::size_t offset, bool backward);  // GpuGPT's parameter source
  void start_gather(Gathered& g, const ZeroUnit& unit);
  void finish_gather(Gathered& g);
  void release_gathered();  // after a pass: every gathered unit freed
  void require_nothing_gathered(const char* pass) const;
  void on_grads_ready(std::size_t offset);
  void finish_reduction(Reduction& r);
  void finish_reductions(std::size_t keep);                         // until at most `keep` are in flight
  void copy_out(const F* from, std::size_t at, std::size_t count);  // offload: shard elements to the host
  // Stage 2 + offload: a reduced piece on its way to the host's gradient shard. `copied` is
  // recorded on the copy stream after its copy: the working buffer is freed after it, and the
  // host adds the piece only once it has completed.
  struct Landing {
    std::size_t at = 0, count = 0;  // shard elements
    bool first = false;             // the step's first micro-batch: assigned, not added
    Event copied;
  };
  void land_piece(Reduction& r);      // its copy out, then the working buffer's release
  void add_landed(std::size_t keep);  // until at most `keep` landings wait to be added
  void add_to_host_grads(const Landing& l);
  void reduce_gradients();
  void all_gather_params();
  StepOutcome device_step(AdamW& optimizer, double lr, double grad_scale, double clip);
  StepOutcome offload_step(AdamW& optimizer, double lr, double grad_scale, double clip);
  // This rank's parameter shard: inside the whole buffer (stages 1, 2) or the shard buffer (3).
  F* own_params() { return stage_ <= 2 ? gpt_.params().data() + shards_.begin() : param_shard_.data(); }
  const F* own_params() const { return stage_ <= 2 ? gpt_.params().data() + shards_.begin() : param_shard_.data(); }
  // This rank's gradient shard: inside the whole buffer (stage 1) or the shard buffer (stages 2
  // and 3 on the GPU; none under stage 2 + offload, whose shard is host_grads_).
  F* own_grads() { return stage_ == 1 ? gpt_.grads().data() + shards_.begin() : grad_shard_.data(); }
  const F* own_grads() const { return stage_ == 1 ? gpt_.grads().data() + shards_.begin() : grad_shard_.data(); }
  void sync() const;

  int stage_;
  bool offload_;
  Communicator& dp_;
  MemoryTracker* tracker_;
  MemoryTracker host_tracker_;  // offload's memory space (declared before what it counts)
  ZeroShards shards_;
  GpuGPT<F> gpt_;
  std::unique_ptr<Communicator> dev_;     // dp over device memory, after gpt_'s stream
  DeviceBuffer<F> param_shard_;           // stage 3: this rank's parameters
  DeviceBuffer<F> grad_shard_;            // stages 2, 3 without offload: this rank's summed gradients
  std::vector<DeviceBuffer<F>> working_;  // stage 2: each unit's gradients during its backward
  // On the GPU (no offload): the shard's fp32 master weights (mixed only), m and v.
  DeviceBuffer<float> master_, m_, v_;
  DeviceBuffer<double> sum_squares_, partials_;  // the norm's reduction
  // Offload: the shard's fp32 master weights and gradients in host memory, and (mixed) the
  // shard in the model's type on its way to and from the GPU; fp32 stage 2: where a later
  // micro-batch's pieces land before they are added (the first lands in host_grads_); all pinned.
  Buffer<float> host_master_, host_grads_;
  Buffer<std::uint16_t> host_half_;
  Buffer<float> host_landing_;
  PinnedRegistration pin_master_, pin_grads_, pin_half_, pin_landing_;
  Stream copy_stream_;                      // offload: the PCIe copies, beside the model's stream
  mutable std::vector<float> host_params_;  // master_params()'s copy
  std::deque<Reduction> reductions_;        // in flight
  std::deque<Landing> landings_;            // stage 2 + offload: copied out, not yet added on the host
  Gathered root_emb_, root_lnf_;            // stage 3: the embeddings and ln_f, for a pass
  std::deque<Gathered> blocks_;             // stage 3: at most two blocks, this one and the next
  int backwards_left_ = 0;                  // backward passes before the communicating one
  bool communicating_ = true;               // this backward reduce-scatters
  bool reduced_ = false;                    // the step's gradients were reduced during backward
  bool first_contribution_ = true;  // stage 2: the step's first reduced sums are copied (assigned), later ones added
  Timeline timeline_;
};

// The model for a precision ("fp32", "bf16", "fp16"); ConfigError for anything else.
std::unique_ptr<ZeroTrainModel> make_gpu_zero_model(const GPTConfig& config, int stage, const std::string& precision,
                                                    Communicator& dp, const DeviceCommFactory& make_comm,
                                                    MemoryTracker* tracker, bool offload);

}  // namespace scalelab::cuda
