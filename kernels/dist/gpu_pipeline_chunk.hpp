// Stage 05 on the GPU: a pipeline chunk (dist/pipeline_chunk.hpp) that computes on the GPU, the
// GPU GPT's slice (kernels/model/gpu_gpt.hpp) with its parameters and gradients in device memory.
//
// What crosses to the neighbouring stages are device messages (device_messages.hpp) in the
// model's boundary type (fp32, bf16 or fp16: the same bytes on the wire as the CPU pipeline's),
// sent over NCCL from GPU to GPU, or staged through the host where ranks share one GPU. The
// host-fp32 boundary of the CPU chunks (forward_slice's input, output(), input_grad()) is not
// used: forward_slice runs only a first stage, from tokens.
//
// The stage's flat host buffers stay the truth (dist/pipeline_stage_model.hpp): load_params()
// copies the chunk's range of them into the device before a step, store_grads() copies the
// step's gradients out after its last backward. bf16 and fp16 have the same bits on the host
// (precision/half.hpp) and the device (__nv_bfloat16, __half), so both copies are plain bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "dist/device_chunk.hpp"
#include "kernels/core/device_buffer.hpp"
#include "kernels/core/dtype.hpp"
#include "kernels/dist/device_messages.hpp"
#include "kernels/model/gpu_gpt.hpp"
#include "precision/half.hpp"

namespace scalelab::cuda {

template <typename F>
class GpuPipelineChunk final : public PipelineChunk {
 public:
  static constexpr bool kMixed = !std::is_same_v<F, float>;

  // The GPU slice storage.slice with its device memory counted in `device`; its host copy in
  // `storage` (fp32: params and grads; mixed: storage.mixed).
  GpuPipelineChunk(const GPTConfig& config, const DeviceChunkStorage& storage, MemoryTracker* device);

  const ModelSlice& slice() const override { return gpt_.slice(); }
  const ParamLayout& layout() const override { return gpt_.layout(); }
  std::size_t num_params() const override { return gpt_.num_params(); }
  std::size_t boundary_elements(int B, int T) const override {
    return static_cast<std::size_t>(B) * T * gpt_.config().channels;
  }
  DataType boundary_type() const override { return DType<F>::comm_type; }

  // From tokens only (the input of a later stage is a device message: forward_message).
  float forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) override;
  const float* output() const override { return nullptr; }  // on the device: output_message
  // From the loss only (a later stage's gradient is a device message: backward_message).
  void backward_slice(const float* doutput, float loss_scale) override;
  // ZB-H1's split backward has no GPU kernels: PipelineStrategy refuses zb-h1 on the GPU first.
  void backward_input(const float* doutput, float loss_scale) override;
  void backward_weight() override;
  const float* input_grad() const override { return nullptr; }  // on the device: input_grad_message
  // The boundary as device messages: each returns once the chunk's stream is done with them.
  float forward_message(const int* tokens, Message& input, const int* targets, int B, int T) override;
  void backward_message(Message& doutput, float loss_scale) override;
  Message output_message(std::size_t n, const MessagePlace& place) const override;
  Message input_grad_message(std::size_t n, const MessagePlace& place) const override;
  void stash_activations(int key) override { gpt_.stash_activations(key); }
  void restore_activations(int key) override { gpt_.restore_activations(key); }
  void release_activations() override { gpt_.release_activations(); }
  std::size_t stashed_count() const override { return gpt_.stashed_count(); }

  void set_checkpoint_policy(const CheckpointPolicy& policy) override { gpt_.set_checkpoint_policy(policy); }
  void set_attention(AttentionKind kind) override { gpt_.set_attention(kind); }
  // GPT-2's initialisation on the host, into the host copy (mixed: the master weights held, and
  // every parameter rounded to half), as the CPU chunks initialise theirs.
  void init_weights(std::uint64_t seed) override;
  std::size_t block_forward_count() const override { return gpt_.block_forward_count(); }

  void load_params() override;
  void store_grads() override;
  void zero_grads() override { gpt_.zero_grad(); }

 private:
  GpuGPT<F> gpt_;
  DeviceChunkStorage host_;
  std::size_t boundary_ = 0;  // B T C of the last forward (every micro-batch of a step has it)
};

// The DeviceChunkFactory of `scalelab train --pp P --device cuda`: fp32, bf16 or fp16 chunks
// on the current device.
std::unique_ptr<PipelineChunk> make_gpu_pipeline_chunk(const GPTConfig& config, const std::string& precision,
                                                       const DeviceChunkStorage& storage, MemoryTracker* device);

}  // namespace scalelab::cuda
