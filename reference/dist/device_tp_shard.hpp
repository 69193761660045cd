// Stage 06 on a device: a tensor-parallel shard whose forward and backward run on a GPU.
//
// The split is the one the pipeline's device chunks use (dist/device_chunk.hpp), ZeRO-Offload's:
// the host shard (dist/tp_model.hpp, or dist/tp_mixed_model.hpp in bf16/fp16) keeps the flat
// parameter and gradient buffers and everything done with them (AdamW with the whole model's
// clipping norm, the data-parallel all-reduce, ZeRO-1, checkpoints, the weights file); the
// device chunk keeps a copy of the shard on the GPU and computes there, its collectives over a
// device communicator of the tensor-parallel group (NCCL, or host staging where the ranks share
// one GPU). Per step:
//
//   begin_step     load_params: the host parameters into the device (one copy)
//   micro-batches  forward and backward on the device, gradients accumulating there
//   sync           store_grads: the device gradients into the host buffer (one copy), then the
//                  data-parallel reduction and the optimizer on the host, as on the CPU
//
// The strategy (dist/tp_strategy.hpp), or the pipeline stage that holds the shard as a chunk
// (tp x pp, dist/pipeline_stage_model.hpp), calls the hooks; a CPU shard ignores them. The
// device's memory is counted in device_memory(), apart from the host's.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "dist/device_chunk.hpp"
#include "dist/tp_shard_model.hpp"
#include "train/train_options.hpp"

namespace scalelab {

// A pipeline chunk on a device that holds a tensor-parallel shard: the ledger of its collectives
// is its group's.
class DeviceTpChunk : public PipelineChunk {
 public:
  virtual TpGroup& group() = 0;
};

// Makes the device chunk of rank tp.rank() of tp.size() (tp: the host communicator of the
// tensor-parallel group; the chunk makes the device communicator it computes with), with or
// without sequence parallelism, in `precision`, its host copy in `storage`, its device memory
// counted in `device`.
using DeviceTpChunkFactory = std::function<std::unique_ptr<DeviceTpChunk>(
    const GPTConfig& config, const std::string& precision, const DeviceChunkStorage& storage, Communicator& tp,
    bool sequence_parallel, MemoryTracker* device)>;

// The check of --tp on a device (nothing for --device cpu), raised alike on every rank: the
// program must give the strategy GPU shards (device_chunks).
void check_tp_on_device(const TrainOptions& options, bool device_chunks);

class DeviceTpShardModel final : public TpShardModel {
 public:
  // host: the shard as the CPU builds it (its flat buffers, the optimizer's); the chunk from
  // make_chunk over host's buffers (storage, with its slice) and the host communicator tp, its
  // memory counted in `device` (a pipeline stage's tracker of the GPU's bytes, which must outlive
  // this), or with none given in this shard's own.
  DeviceTpShardModel(std::unique_ptr<TpShardModel> host, const DeviceChunkStorage& storage,
                     const DeviceTpChunkFactory& make_chunk, const std::string& precision, Communicator& tp,
                     MemoryTracker* device = nullptr);

  // Compute: the device chunk's (which checks the token ids: its kernels cannot throw).
  double forward(const int* tokens, const int* targets, int B, int T) override {
    return chunk_->forward_slice(tokens, nullptr, targets, B, T);
  }
  void backward(double loss_scale) override { chunk_->backward_slice(nullptr, static_cast<float>(loss_scale)); }
  void zero_grad() override { chunk_->zero_grads(); }
  void load_params() override { chunk_->load_params(); }
  void store_grads() override { chunk_->store_grads(); }
  void zero_grads() override { chunk_->zero_grads(); }
  TpGroup& group() override { return chunk_->group(); }
  void set_checkpoint_policy(const CheckpointPolicy& policy) override { chunk_->set_checkpoint_policy(policy); }
  void set_attention(AttentionKind kind) override { chunk_->set_attention(kind); }
  std::size_t block_forward_count() const override { return chunk_->block_forward_count(); }
  const MemoryTracker* device_memory() const override { return device_; }
  const DeviceTpChunk& chunk() const { return *chunk_; }

  // As a pipeline chunk (tp x pp, dist/pipeline_stage_model.hpp): the device chunk's.
  std::size_t boundary_elements(int B, int T) const override { return chunk_->boundary_elements(B, T); }
  DataType boundary_type() const override { return chunk_->boundary_type(); }
  float forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) override {
    return chunk_->forward_slice(tokens, input, targets, B, T);
  }
  const float* output() const override { return chunk_->output(); }
  void backward_slice(const float* doutput, float loss_scale) override { chunk_->backward_slice(doutput, loss_scale); }
  void backward_input(const float* doutput, float loss_scale) override { chunk_->backward_input(doutput, loss_scale); }
  void backward_weight() override { chunk_->backward_weight(); }
  const float* input_grad() const override { return chunk_->input_grad(); }
  float forward_message(const int* tokens, Message& input, const int* targets, int B, int T) override {
    return chunk_->forward_message(tokens, input, targets, B, T);
  }
  void backward_message(Message& doutput, float loss_scale) override { chunk_->backward_message(doutput, loss_scale); }
  Message output_message(std::size_t n, const MessagePlace& place) const override {
    return chunk_->output_message(n, place);
  }
  Message input_grad_message(std::size_t n, const MessagePlace& place) const override {
    return chunk_->input_grad_message(n, place);
  }
  void stash_activations(int key) override { chunk_->stash_activations(key); }
  void restore_activations(int key) override { chunk_->restore_activations(key); }
  void release_activations() override { chunk_->release_activations(); }
  std::size_t stashed_count() const override { return chunk_->stashed_count(); }

  // Storage, the optimizer and the files: the host shard's.
  const GPTConfig& config() const override { return host_->config(); }
  const ModelSlice& slice() const override { return host_->slice(); }
  const ParamLayout& layout() const override { return host_->layout(); }
  std::size_t num_params() const override { return host_->num_params(); }
  const TpLayout& shard() const override { return host_->shard(); }
  // Under sequence parallelism: the host shard sums the replicated tensors' gradient parts (stored
  // from the device) over the group; its all-reduce joins the chunk's ledger, as on the CPU.
  void finish_gradients() override;
  void init_weights(std::uint64_t seed) override { host_->init_weights(seed); }
  const float* master_params() const override { return host_->master_params(); }
  void set_master_params(const float* values) override { host_->set_master_params(values); }
  StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) override {
    return host_->optimizer_step(optimizer, lr, grad_scale, clip);
  }
  const IndexRanges& counted_elsewhere() const override { return host_->counted_elsewhere(); }
  void broadcast_params(Communicator& group, int root) override { host_->broadcast_params(group, root); }
  float* fp32_grads() override { return host_->fp32_grads(); }
  GradBuffer typed_grads() override { return host_->typed_grads(); }
  std::string precision_name() const override { return host_->precision_name(); }

 private:
  std::unique_ptr<MemoryTracker> own_device_;  // when no tracker was given; outlives chunk_
  MemoryTracker* device_;
  std::unique_ptr<TpShardModel> host_;
  std::unique_ptr<DeviceTpChunk> chunk_;
};

}  // namespace scalelab
