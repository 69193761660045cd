// Stage 05: what the pipeline executor runs on one rank: a model chunk, a contiguous range of
// blocks (with the embeddings on the first model stage, ln_f and the LM head on the last). Two
// kinds implement it:
//   GptChunk             the GPT's own slice (model/gpt.hpp), the whole width of every layer
//   MixedChunk           the mixed-precision GPT's slice (precision/mixed_model.hpp: stage 03)
//   TensorParallelModel  a slice split over a tensor-parallel group (dist/tp_model.hpp: tp x pp)
//   GpuPipelineChunk     the GPU GPT's slice (kernels/dist/gpu_pipeline_chunk.hpp: --device cuda)
// so a pipeline does not care how a chunk computes, only that it takes its neighbour's
// activations (or the tokens), gives its own to the next, and the same for the gradients backward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/datatype.hpp"
#include "core/error.hpp"
#include "dist/pipeline_message.hpp"
#include "model/checkpoint_policy.hpp"
#include "model/gpt.hpp"
#include "model/layers/attention_kind.hpp"
#include "model/params.hpp"
#include "model/slice.hpp"
#include "precision/mixed_model.hpp"

namespace scalelab {

class PipelineChunk {
 public:
  virtual ~PipelineChunk() = default;

  virtual const ModelSlice& slice() const = 0;
  // This chunk's tensors (its part of each, under tensor parallelism), in its own flat buffer.
  virtual const ParamLayout& layout() const = 0;
  virtual std::size_t num_params() const = 0;
  // Elements of the activations (and of their gradient) that cross to the next chunk for a
  // micro-batch of B x T tokens: B T C, or this rank's rows of them under sequence parallelism.
  virtual std::size_t boundary_elements(int B, int T) const = 0;
  // Their type on the wire: fp32, or the half type of a mixed-precision chunk. The chunk's
  // forward and backward take and give fp32 values that this type holds exactly.
  virtual DataType boundary_type() const { return DataType::kFloat32; }

  // As GPTModel's slices: forward from tokens (with the embeddings) or the previous chunk's
  // output; the mean loss with the head, else 0.
  virtual float forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) = 0;
  virtual const float* output() const = 0;
  // Accumulates the parameter gradients; with the head from the loss (scaled), else from doutput.
  virtual void backward_slice(const float* doutput, float loss_scale) = 0;
  // Zero-bubble's split backward (ZB-H1): the input gradient now, the weight gradients later.
  virtual void backward_input(const float* doutput, float loss_scale) = 0;
  virtual void backward_weight() = 0;
  virtual const float* input_grad() const = 0;
  // The executor's side of the boundary (dist/pipeline_executor.hpp): the input and the output's
  // gradient as the messages received (empty where there is no neighbour), the output and the
  // input gradient as messages of n elements made in `place`, to send. These defaults serve a
  // chunk computing on the CPU: host messages, read as fp32 (pipeline_chunk.cpp). A chunk
  // computing on a GPU overrides them to read and write device messages, so that over NCCL the
  // activations go from GPU to GPU.
  virtual float forward_message(const int* tokens, Message& input, const int* targets, int B, int T);
  virtual void backward_message(Message& doutput, float loss_scale);
  virtual Message output_message(std::size_t n, const MessagePlace& place) const;
  virtual Message input_grad_message(std::size_t n, const MessagePlace& place) const;
  // Micro-batches in flight: the saved activations move aside under a key and come back.
  virtual void stash_activations(int key) = 0;
  virtual void restore_activations(int key) = 0;
  virtual void release_activations() = 0;
  virtual std::size_t stashed_count() const = 0;

  virtual void set_checkpoint_policy(const CheckpointPolicy& policy) = 0;
  virtual void set_attention(AttentionKind kind) = 0;
  virtual void init_weights(std::uint64_t seed) = 0;
  virtual std::size_t block_forward_count() const = 0;

  // A chunk that computes on a device (a GPU) keeps its own copy of its parameters and gradients
  // there, while the stage's flat host buffers stay the ones the optimizer, the collectives and
  // the files use: the stage loads the parameters into the chunk before a step's first forward,
  // and stores the chunk's gradients (accumulated over the step's micro-batches from zero) back
  // after its last backward. A CPU chunk computes on the flat buffers themselves: nothing to do.
  virtual void load_params() {}
  virtual void store_grads() {}
  virtual void zero_grads() {}
};

// The GPT's slice as a chunk (stage 05 alone, or with data parallelism).
class GptChunk final : public PipelineChunk {
 public:
  explicit GptChunk(std::unique_ptr<GPT> gpt) : gpt_(std::move(gpt)) {}
  GPT& gpt() { return *gpt_; }
  const GPT& gpt() const { return *gpt_; }

  const ModelSlice& slice() const override { return gpt_->slice(); }
  const ParamLayout& layout() const override { return gpt_->layout(); }
  std::size_t num_params() const override { return gpt_->num_params(); }
  std::size_t boundary_elements(int B, int T) const override {
    return static_cast<std::size_t>(B) * T * gpt_->config().channels;
  }
  float forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) override {
    return gpt_->forward_slice(tokens, input, targets, B, T);
  }
  const float* output() const override { return gpt_->output(); }
  void backward_slice(const float* doutput, float loss_scale) override { gpt_->backward_slice(doutput, loss_scale); }
  void backward_input(const float* doutput, float loss_scale) override { gpt_->backward_input(doutput, loss_scale); }
  void backward_weight() override { gpt_->backward_weight(); }
  const float* input_grad() const override { return gpt_->input_grad(); }
  void stash_activations(int key) override { gpt_->stash_activations(key); }
  void restore_activations(int key) override { gpt_->restore_activations(key); }
  void release_activations() override { gpt_->release_activations(); }
  std::size_t stashed_count() const override { return gpt_->stashed_count(); }
  void set_checkpoint_policy(const CheckpointPolicy& policy) override { gpt_->set_checkpoint_policy(policy); }
  void set_attention(AttentionKind kind) override { gpt_->set_attention(kind); }
  void init_weights(std::uint64_t seed) override { gpt_->init_weights(seed); }
  std::size_t block_forward_count() const override { return gpt_->block_forward_count(); }

 private:
  std::unique_ptr<GPT> gpt_;
};

// The mixed-precision GPT's slice as a chunk (stage 05 with stage 03): half parameters, gradients
// and activations, the boundary tensors sent in half. Its forward widens its half output once for
// output(); its input gradient is the fp32 staging that holds half values.
class MixedChunk final : public PipelineChunk {
 public:
  explicit MixedChunk(std::unique_ptr<MixedPrecisionModel> model) : model_(std::move(model)) {}
  MixedPrecisionModel& model() { return *model_; }

  const ModelSlice& slice() const override { return model_->slice(); }
  const ParamLayout& layout() const override { return model_->layout(); }
  std::size_t num_params() const override { return model_->num_params(); }
  std::size_t boundary_elements(int B, int T) const override {
    return static_cast<std::size_t>(B) * T * model_->config().channels;
  }
  DataType boundary_type() const override { return model_->half_type(); }
  float forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) override {
    const double loss = model_->forward_slice(tokens, input, targets, B, T);
    output_ = model_->slice().head ? nullptr : model_->output();
    return static_cast<float>(loss);
  }
  const float* output() const override { return output_; }
  void backward_slice(const float* doutput, float loss_scale) override { model_->backward_slice(doutput, loss_scale); }
  void backward_input(const float* doutput, float loss_scale) override { model_->backward_input(doutput, loss_scale); }
  void backward_weight() override { model_->backward_weight(); }
  const float* input_grad() const override { return model_->input_grad(); }
  void stash_activations(int key) override { model_->stash_activations(key); }
  void restore_activations(int key) override { model_->restore_activations(key); }
  void release_activations() override { model_->release_activations(); }
  std::size_t stashed_count() const override { return model_->stashed_count(); }
  void set_checkpoint_policy(const CheckpointPolicy& policy) override { model_->set_checkpoint_policy(policy); }
  void set_attention(AttentionKind kind) override { model_->set_attention(kind); }
  void init_weights(std::uint64_t seed) override { model_->init_weights(seed); }
  std::size_t block_forward_count() const override { return model_->block_forward_count(); }

 private:
  std::unique_ptr<MixedPrecisionModel> model_;
  const float* output_ = nullptr;  // the last forward's output, widened (without the head)
};

}  // namespace scalelab
