// The GPU GPT's slice as a pipeline chunk: host staging at the boundaries, the host copy of the
// parameters and gradients loaded and stored once per step.
#include "kernels/dist/gpu_pipeline_chunk.hpp"

#include <optional>

#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"

namespace scalelab::cuda {

namespace {

template <typename F>
constexpr HalfFormat half_format_of() {
  return std::is_same_v<F, bf16> ? HalfFormat::kBF16 : HalfFormat::kFP16;
}

// count elements between host and device on `stream`, then waits for it (the host reads or
// frees its side right after).
void copy_and_wait(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (bytes == 0) return;
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

template <typename F>
GpuPipelineChunk<F>::GpuPipelineChunk(const GPTConfig& config, const DeviceChunkStorage& storage, MemoryTracker* device)
    : gpt_(config, device, GpuOptions{.slice = storage.slice}), host_(storage), device_(device) {
  device_chunk_host_params(host_, kMixed);  // checks that the host copy is there
  device_chunk_host_grads(host_, kMixed);
}

template <typename F>
const F* GpuPipelineChunk<F>::to_device(const float* host, std::size_t n) {
  if (received_.size() != n) {
    received_ = DeviceBuffer<F>();
    received_ = DeviceBuffer<F>(n, MemCategory::kComm, device_);
  }
  if constexpr (kMixed) {
    narrowed_.resize(n);
    float_to_half(narrowed_.data(), host, n, half_format_of<F>());  // exact: the sender held them in half
    copy_and_wait(received_.data(), narrowed_.data(), n * sizeof(F), cudaMemcpyHostToDevice, gpt_.stream());
  } else {
    copy_and_wait(received_.data(), host, n * sizeof(F), cudaMemcpyHostToDevice, gpt_.stream());
  }
  return received_.data();
}

template <typename F>
void GpuPipelineChunk<F>::to_host(const F* device, std::size_t n, std::vector<float>& out) {
  out.resize(n);
  if constexpr (kMixed) {
    narrowed_.resize(n);
    copy_and_wait(narrowed_.data(), device, n * sizeof(F), cudaMemcpyDeviceToHost, gpt_.stream());
    half_to_float(out.data(), narrowed_.data(), n, half_format_of<F>());
  } else {
    copy_and_wait(out.data(), device, n * sizeof(F), cudaMemcpyDeviceToHost, gpt_.stream());
  }
}

template <typename F>
float GpuPipelineChunk<F>::forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) {
  boundary_ = boundary_elements(B, T);
  const F* x = slice().embeddings ? nullptr : to_device(input, boundary_);
  const double loss = gpt_.forward_slice(tokens, x, targets, B, T);
  if (!slice().head) to_host(gpt_.output(), boundary_, output_);
  return static_cast<float>(loss);
}

template <typename F>
void GpuPipelineChunk<F>::backward_slice(const float* doutput, float loss_scale) {
  const F* d = slice().head ? nullptr : to_device(doutput, boundary_);
  gpt_.backward_slice(d, loss_scale);
  if (slice().embeddings)
    SCALELAB_CUDA_CHECK(cudaStreamSynchronize(gpt_.stream()));  // the gradients are final for store_grads
  else
    to_host(gpt_.input_grad(), boundary_, input_grad_);
}

template <typename F>
void GpuPipelineChunk<F>::backward_input(const float*, float) {
  throw ConfigError(
      "schedule: --schedule zb-h1 needs the split backward, which the GPU model does not have in this build; use "
      "--schedule 1f1b on the GPU");
}

template <typename F>
void GpuPipelineChunk<F>::backward_weight() {
  backward_input(nullptr, 0);
}

template <typename F>
void GpuPipelineChunk<F>::init_weights(std::uint64_t seed) {
  const std::optional<HalfFormat> half = kMixed ? std::optional<HalfFormat>(half_format_of<F>()) : std::nullopt;
  init_device_chunk_weights(gpt_.config(), gpt_.layout(), host_, half, seed);
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
