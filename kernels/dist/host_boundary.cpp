// Host <-> device copies of a GPU chunk's messages.
#include "kernels/dist/host_boundary.hpp"

#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"

namespace scalelab::cuda {

void refuse_split_backward_on_gpu() {
  throw ConfigError(
      "schedule: --schedule zb-h1 needs the split backward, which the GPU model does not have in this build; use "
      "--schedule 1f1b on the GPU");
}

void copy_and_wait(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (bytes == 0) return;
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream));
}

template <typename F>
const F* HostBoundary<F>::to_device(const float* host, std::size_t n) {
  if (received_.size() != n) {
    received_ = DeviceBuffer<F>();
    received_ = DeviceBuffer<F>(n, MemCategory::kComm, device_);
  }
  if constexpr (std::is_same_v<F, float>) {
    copy_and_wait(received_.data(), host, n * sizeof(F), cudaMemcpyHostToDevice, stream_);
  } else {
    narrowed_.resize(n);
    float_to_half(narrowed_.data(), host, n, *half_format_of<F>());  // exact: the sender held them in F
    copy_and_wait(received_.data(), narrowed_.data(), n * sizeof(F), cudaMemcpyHostToDevice, stream_);
  }
  return received_.data();
}

template <typename F>
void HostBoundary<F>::to_host(const F* device, std::size_t n, std::vector<float>& out) {
  out.resize(n);
  if constexpr (std::is_same_v<F, float>) {
    copy_and_wait(out.data(), device, n * sizeof(F), cudaMemcpyDeviceToHost, stream_);
  } else {
    narrowed_.resize(n);
    copy_and_wait(narrowed_.data(), device, n * sizeof(F), cudaMemcpyDeviceToHost, stream_);
    half_to_float(out.data(), narrowed_.data(), n, *half_format_of<F>());
  }
}

template class HostBoundary<float>;
template class HostBoundary<bf16>;
template class HostBoundary<fp16>;

}  // namespace scalelab::cuda
