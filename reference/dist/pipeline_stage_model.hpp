// Stage 05: what one pipeline rank holds. The GPT's L blocks are cut into S = p * v model
// stages of contiguous blocks (the embeddings with model stage 0, ln_f and the LM head with
// model stage S - 1); rank r holds model stages r, r + p, ... (v chunks, v = 1 except for the
// interleaved schedule). Its chunks are GPT slices (model/slice.hpp) over one flat parameter
// buffer and one flat gradient buffer, so the optimizer, the data-parallel all-reduce and the
// files see one range, as for the whole model.
//
// Uneven depths: model stage s gets floor(L / S) blocks, plus one when s < L mod S (the extra
// blocks go to the early stages, because the last one also runs the LM head, the biggest
// product of the model).
//
// With tensor parallelism (tp x pp) each chunk is this rank's split of its slice
// (TensorParallelModel, dist/tp_model.hpp), and the flat buffers hold those splits.
//
// In mixed precision (stage 03: --precision bf16|fp16) each chunk is a mixed-precision slice
// (MixedChunk; with tensor parallelism MixedTensorParallelModel, dist/tp_mixed_model.hpp), and the
// flat buffers are the half parameters and gradients and the fp32 master weights: 2 + 2 + 4 bytes
// per parameter of the stage, plus AdamW's 8 (the trainer's), as for the whole mixed-precision
// model. The tensors that cross to the next stage are half.
//
// On a GPU (--device cuda) each chunk is the GPU GPT's slice (kernels/dist/gpu_pipeline_chunk.hpp,
// made by a DeviceChunkFactory) with its parameters and gradients in device memory, while the
// flat buffers above stay on the host, where the optimizer steps, the tied wte's copies are
// summed and the data-parallel collectives run, as ZeRO-Offload keeps its optimizer: the stage
// loads its parameters into the device before each step (load_params) and stores the step's
// gradients back after it (store_grads). The device's bytes are counted in device_memory().
// With tensor parallelism on a GPU each chunk is the CPU's tensor-parallel split of its slice on
// the flat buffers (as above), computing through its GPU half (dist/device_tp_shard.hpp).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "dist/device_chunk.hpp"
#include "dist/device_tp_shard.hpp"
#include "dist/norm_share.hpp"
#include "dist/tp_layout.hpp"
#include "model/gpt.hpp"
#include "model/train_model.hpp"
#include "precision/half.hpp"
#include "schedule/pipeline_schedule.hpp"

namespace scalelab {

// The blocks, embeddings and head of model stage `stage` of `stages`. Throws ConfigError when
// there are more model stages than blocks.
ModelSlice pipeline_stage_slice(const GPTConfig& config, int stage, int stages);

// Under the distributed optimizer in mixed precision (dist/distributed_optimizer.hpp): the stage
// keeps the fp32 master weights of one shard of its flat buffer only, shard `rank` of `parts`
// (BlockPartition, the collectives' cut). The default, one part, keeps them all.
struct MasterShard {
  int rank = 0, parts = 1;
};

// Tensor parallelism inside each pipeline stage (tp x pp): the group and whether the
// LayerNorm/residual regions are split along the sequence.
struct StageTensorParallel {
  Communicator* comm = nullptr;  // null: no tensor parallelism
  bool sequence_parallel = false;
  // On a GPU (with the stage's DeviceChunkFactory): each chunk's GPU half; the chunk is then a
  // DeviceTpShardModel around the CPU shard on the stage's flat buffers.
  DeviceTpChunkFactory device;
};

class PipelineStageModel final : public TrainModel {
 public:
  // Rank `rank`'s chunks of the pipeline `shape` (p ranks x v chunks), each split over tp.comm
  // when given (the communicator must outlive the model).
  // precision: "fp32", or "bf16"/"fp16" (mixed precision), with the master weights of `master` only.
  // device: when given, the chunks compute on a device (no tensor parallelism there yet).
  PipelineStageModel(const GPTConfig& config, const PipelineShape& shape, int rank, MemoryTracker* tracker,
                     StageTensorParallel tp = {}, const std::string& precision = "fp32", MasterShard master = {},
                     const DeviceChunkFactory& device = {});

  int chunk_count() const { return static_cast<int>(chunks_.size()); }
  // Chunk c as the executor runs it.
  PipelineChunk& chunk_at(int c) { return *chunks_.at(c); }
  const PipelineChunk& chunk_at(int c) const { return *chunks_.at(c); }
  // Chunk c's GPT slice (fp32 without tensor parallelism; ConfigError otherwise).
  GPT& chunk(int c);
  const GPT& chunk(int c) const;
  bool tensor_parallel() const { return tp_.comm != nullptr; }
  bool mixed() const { return half_.has_value(); }
  // Where chunk c's tensors start in the flat buffers.
  std::size_t chunk_offset(int c) const { return offsets_.at(c); }
  // Whether this rank holds model stage 0 (the embeddings) and model stage S-1 (the head, with
  // its own copy of the tied wte).
  bool holds_embeddings() const { return chunks_.front()->slice().embeddings; }
  bool holds_head() const { return chunks_.back()->slice().head; }
  // Under sequence parallelism, after the step's last backward: every chunk's replicated
  // tensors' gradients summed over the tensor-parallel group (dist/tp_model.hpp).
  void finish_gradients();
  // The communicators the stage's tensor-parallel chunks run their collectives on, one per
  // chunk: the group's host communicator for CPU shards, each chunk's device communicator (NCCL
  // or host staging) for shards on a GPU. Empty without tensor parallelism.
  std::vector<const Communicator*> tp_communicators();
  // Ranges [begin, end) of the flat buffer that another rank counts toward the whole model's
  // gradient norm: the head's copy of the tied wte (model stage 0 counts it; only when the
  // stage holds the head but not the embeddings), and on tensor-parallel ranks other than 0 the
  // replicated tensors. Sorted, not overlapping.
  IndexRanges counted_elsewhere() const;
  // This rank's values of whole-model values (ParamLayout(config) order): its chunks' tensors,
  // split when tensor parallel.
  std::vector<float> held_values(const std::vector<float>& whole) const;
  // This rank's tensors (or their tensor-parallel pieces) in `values` (laid out like the flat
  // buffer), as dist/gather_weights.hpp assembles the whole model from them.
  std::vector<HeldTensor> held(const float* values) const;
  // Where this rank's copy of the tied wte (V*C values) starts in the flat buffers: model stage
  // 0's embedding or the last model stage's LM head (with p >= 2 a rank holds at most one, the
  // layouts' names being unique). Throws ConfigError on a rank that holds neither.
  std::size_t wte_offset() const { return layout_.find("transformer.wte.weight").offset; }
  // Its elements (V C, or this tensor-parallel rank's Vl C), on every rank.
  std::size_t wte_numel() const;
  // Activations stashed over every chunk (micro-batches in flight).
  std::size_t stashed_count() const;
  // Chunks on a device: the parameters into them (before a step's first forward or an
  // evaluation), their gradients into the flat buffers (after the step's last backward). No-ops
  // on the CPU.
  void load_params();
  void store_grads();
  // The device's memory by category (null when the chunks compute on the CPU).
  const MemoryTracker* device_memory() const { return device_memory_.get(); }
  MemoryTracker* device_memory() { return device_memory_.get(); }

  const GPTConfig& config() const override { return config_; }
  const ParamLayout& layout() const override { return layout_; }
  std::size_t num_params() const override { return layout_.num_params(); }
  // A stage cannot run alone: the pipeline executor (dist/pipeline_executor.hpp) drives its
  // chunks. These throw ConfigError saying so.
  double forward(const int* tokens, const int* targets, int B, int T) override;
  void backward(double loss_scale) override;
  void zero_grad() override;
  void set_checkpoint_policy(const CheckpointPolicy& policy) override;
  void set_attention(AttentionKind kind) override;  // every chunk's (stage 08)
  void init_weights(std::uint64_t seed) override;
  // The fp32 parameters, or in mixed precision the fp32 master weights held (all of them, or the
  // MasterShard's).
  const float* master_params() const override { return mixed() ? master_.data() : params_.data(); }
  float* held_master() { return master_.data(); }
  std::uint16_t* half_params() { return half_params_.data(); }
  std::uint16_t* half_grads() { return half_grads_.data(); }
  HalfFormat half_format() const { return half_.value(); }
  // The fp32 parameters (fp32 stages only: ZeRO-1's distributed optimizer shards them).
  float* params();
  // Sets the parameters (the master weights, rounded into the half parameters).
  void set_master_params(const float* values) override;
  // Every rank of `group` gets `root`'s parameters (the replicas of a stage start equal). With a
  // MasterShard only the half parameters travel: each replica drew its master shard from the same
  // initialisation (and a loaded checkpoint sets it shard by shard).
  void broadcast_params(Communicator& group, int root);
  // This stage's update, with the gradient norm of this stage alone (PipelineStrategy clips with
  // the norm over all stages: step_with_norm; this is for a one-stage use).
  StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) override;
  // The update with the whole model's gradient norm: this rank's sum of squares of its unscaled
  // gradients, leaving out `skip` (counted_elsewhere()), turned into the whole model's by `total`.
  StepOutcome step_with_norm(AdamW& optimizer, double lr, double grad_scale, double clip, const IndexRanges& skip,
                             const std::function<double(double)>& total);
  float* fp32_grads() override { return grads_.data(); }  // null in mixed precision
  GradBuffer typed_grads() override;
  std::size_t block_forward_count() const override;
  std::string precision_name() const override { return mixed() ? half_format_name(*half_) : "fp32"; }

 private:
  void require_all_master(const char* what) const;

  GPTConfig config_;
  StageTensorParallel tp_;
  std::vector<ModelSlice> slices_;
  ParamLayout layout_;
  std::optional<HalfFormat> half_;                  // mixed precision: the half format
  Buffer<float> params_, grads_;                    // fp32 (empty in mixed precision)
  Buffer<std::uint16_t> half_params_, half_grads_;  // mixed precision
  Buffer<float> master_;                            // mixed precision: fp32 master weights (or a shard)
  bool master_sharded_ = false;
  Buffer<float> step_chunk_;                      // mixed precision: the step's fp32 gradient chunk
  std::unique_ptr<MemoryTracker> device_memory_;  // chunks on a device: its bytes
  std::vector<std::size_t> offsets_;
  std::vector<std::unique_ptr<PipelineChunk>> chunks_;
};

}  // namespace scalelab
