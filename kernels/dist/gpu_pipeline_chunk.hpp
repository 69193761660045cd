// Stage 05 on the GPU: a pipeline chunk (dist/pipeline_chunk.hpp) that computes on the GPU, the
// GPU GPT's slice (kernels/model/gpu_gpt.hpp) with its parameters and gradients in device memory.
//
// What crosses to the neighbouring stages goes through host memory, as the executor's messages
// are host buffers over the host communicator (MPI): a forward's output is copied out of the
// device (and widened from half to the fp32 the executor reads), the received activations and
// gradients are copied in (narrowed to half: exact, as the sender's device held them in half).
// That is the host staging of ranks that share one GPU; the message bytes on the wire are the
// same as the CPU pipeline's (the boundary type is the model's: fp32, bf16 or fp16).
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
#include "kernels/dist/host_boundary.hpp"
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

  float forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) override;
  const float* output() const override { return gpt_.slice().head ? nullptr : output_.data(); }
  void backward_slice(const float* doutput, float loss_scale) override;
  // ZB-H1's split backward has no GPU kernels: PipelineStrategy refuses zb-h1 on the GPU first.
  void backward_input(const float* doutput, float loss_scale) override;
  void backward_weight() override;
  const float* input_grad() const override { return input_grad_.data(); }
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
  HostBoundary<F> boundary_io_;    // the messages' copies between host and device
  std::size_t boundary_ = 0;       // B T C of the last forward (every micro-batch of a step has it)
  std::vector<float> output_;      // (B,T,C) the last forward's output, fp32 on the host
  std::vector<float> input_grad_;  // (B,T,C) the last backward's input gradient, fp32 on the host
};

// The DeviceChunkFactory of `scalelab train --pp P --device cuda`: fp32, bf16 or fp16 chunks
// on the current device.
std::unique_ptr<PipelineChunk> make_gpu_pipeline_chunk(const GPTConfig& config, const std::string& precision,
                                                       const DeviceChunkStorage& storage, MemoryTracker* device);

}  // namespace scalelab::cuda
