// The GPU GPT's slice as a pipeline chunk: device messages at the boundaries, the host copy of
// the parameters and gradients loaded and stored once per step.
#include "kernels/dist/gpu_pipeline_chunk.hpp"

#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"

namespace scalelab::cuda {

template <typename F>
GpuPipelineChunk<F>::GpuPipelineChunk(const GPTConfig& config, const DeviceChunkStorage& storage, MemoryTracker* device)
    : gpt_(config, device, GpuOptions{.slice = storage.slice}), host_(storage) {
  device_chunk_host_params(host_, kMixed);  // checks that the host copy is there
  device_chunk_host_grads(host_, kMixed);
}

template <typename F>
float GpuPipelineChunk<F>::forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) {
  SCALELAB_CHECK(input == nullptr, "a GPU pipeline chunk takes its input activations as a device message");
  Message none;
  return forward_message(tokens, none, targets, B, T);
}

template <typename F>
void GpuPipelineChunk<F>::backward_slice(const float* doutput, float loss_scale) {
  SCALELAB_CHECK(doutput == nullptr, "a GPU pipeline chunk takes d loss / d output as a device message");
  Message none;
  backward_message(none, loss_scale);
}

template <typename F>
float GpuPipelineChunk<F>::forward_message(const int* tokens, Message& input, const int* targets, int B, int T) {
  boundary_ = boundary_elements(B, T);
  const F* x = slice().embeddings ? nullptr : message_input<F>(input, boundary_, "input activations");
  const double loss = gpt_.forward_slice(tokens, x, targets, B, T);
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(gpt_.stream()));  // the input was copied: the message may go
  return static_cast<float>(loss);
}

template <typename F>
void GpuPipelineChunk<F>::backward_message(Message& doutput, float loss_scale) {
  const F* d = slice().head ? nullptr : message_input<F>(doutput, boundary_, "d loss / d output");
  gpt_.backward_slice(d, loss_scale);
  // The message was copied, and on the first stage the gradients are final for store_grads.
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(gpt_.stream()));
}

template <typename F>
Message GpuPipelineChunk<F>::output_message(std::size_t n, const MessagePlace& place) const {
  SCALELAB_CHECK(!slice().head && n == boundary_, "output_message: ", n, " elements asked of a chunk whose output has ",
                 slice().head ? 0 : boundary_);
  return message_of<F>(gpt_.output(), n, place, gpt_.stream());
}

template <typename F>
Message GpuPipelineChunk<F>::input_grad_message(std::size_t n, const MessagePlace& place) const {
  SCALELAB_CHECK(!slice().embeddings && n == boundary_, "input_grad_message: ", n,
                 " elements asked of a chunk whose input gradient has ", slice().embeddings ? 0 : boundary_);
  return message_of<F>(gpt_.input_grad(), n, place, gpt_.stream());
}

template <typename F>
void GpuPipelineChunk<F>::backward_input(const float*, float) {
  refuse_split_backward_on_gpu();
}

template <typename F>
void GpuPipelineChunk<F>::backward_weight() {
  refuse_split_backward_on_gpu();
}

template <typename F>
void GpuPipelineChunk<F>::init_weights(std::uint64_t seed) {
  init_device_chunk_weights(gpt_.config(), gpt_.layout(), host_, half_format_of<F>(), seed);
}

template <typename F>
void GpuPipelineChunk<F>::load_params() {
  copy_and_wait(gpt_.params().data(), device_chunk_host_params(host_, kMixed), gpt_.params().bytes(),
                cudaMemcpyHostToDevice, gpt_.stream());
}

template <typename F>
void GpuPipelineChunk<F>::store_grads() {
  copy_and_wait(device_chunk_host_grads(host_, kMixed), gpt_.grads().data(), gpt_.grads().bytes(),
                cudaMemcpyDeviceToHost, gpt_.stream());
}

template class GpuPipelineChunk<float>;
template class GpuPipelineChunk<bf16>;
template class GpuPipelineChunk<fp16>;

std::unique_ptr<PipelineChunk> make_gpu_pipeline_chunk(const GPTConfig& config, const std::string& precision,
                                                       const DeviceChunkStorage& storage, MemoryTracker* device) {
  if (precision == "fp32") return std::make_unique<GpuPipelineChunk<float>>(config, storage, device);
  if (precision == "bf16") return std::make_unique<GpuPipelineChunk<bf16>>(config, storage, device);
  if (precision == "fp16") return std::make_unique<GpuPipelineChunk<fp16>>(config, storage, device);
  throw ConfigError("precision: unknown precision '" + precision + "'; use fp32, bf16 or fp16");
}

}  // namespace scalelab::cuda
