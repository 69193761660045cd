// Device memory for pipeline messages, and the GPU chunks' copies at their boundary.
#include "kernels/dist/device_messages.hpp"

#include <string>
#include <utility>

#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/dist/host_staging_communicator.hpp"

namespace scalelab::cuda {

DeviceMessagePool::DeviceMessagePool(MemoryTracker* device) : device_(device), free_(std::make_shared<Free>()) {}

std::shared_ptr<void> DeviceMessagePool::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  DeviceBuffer<unsigned char> block;
  if (const auto it = free_->blocks.find(bytes); it != free_->blocks.end()) {
    block = std::move(it->second);
    free_->blocks.erase(it);
  } else {
    block = DeviceBuffer<unsigned char>(bytes, MemCategory::kComm, device_);
  }
  auto* held = new DeviceBuffer<unsigned char>(std::move(block));
  // The deleter gives the block back to the pool while the pool lives, and frees it otherwise.
  std::weak_ptr<Free> pool = free_;
  return std::shared_ptr<void>(held->data(), [held, pool](void*) {
    std::unique_ptr<DeviceBuffer<unsigned char>> owned(held);
    if (const std::shared_ptr<Free> free = pool.lock()) free->blocks.emplace(owned->bytes(), std::move(*owned));
  });
}

PipelineMessages make_staged_pipeline_messages(Communicator& pp, MemoryTracker* device) {
  PipelineMessages m;
  // Staging copies on the legacy default stream; the chunks wait for their own streams before a
  // message is sent or freed (device_messages.hpp), so no other ordering is needed.
  m.comm = std::make_unique<HostStagingCommunicator>(pp.split(0, pp.rank()), cudaStreamLegacy);
  m.memory = std::make_unique<DeviceMessagePool>(device);
  return m;
}

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
const F* message_input(Message& message, std::size_t n, const char* what) {
  SCALELAB_CHECK(message.on_device(), "a GPU pipeline chunk takes its ", what,
                 " as a device message; the pipeline's messages are in host memory");
  SCALELAB_CHECK(message.size() == n && message.type() == DType<F>::comm_type, "the ", what, " message holds ",
                 message.size(), " elements of ", dtype_name(message.type()), ", the chunk expects ", n, " of ",
                 dtype_name(DType<F>::comm_type));
  return static_cast<const F*>(message.data());
}

template <typename F>
Message message_of(const F* values, std::size_t n, const MessagePlace& place, cudaStream_t stream) {
  SCALELAB_CHECK(place.on_device(), "a GPU pipeline chunk sends device messages; the pipeline's are in host memory");
  Message m(n, DType<F>::comm_type, place);
  copy_and_wait(m.data(), values, m.bytes(), cudaMemcpyDeviceToDevice, stream);
  return m;
}

template const float* message_input<float>(Message&, std::size_t, const char*);
template const bf16* message_input<bf16>(Message&, std::size_t, const char*);
template const fp16* message_input<fp16>(Message&, std::size_t, const char*);
template Message message_of<float>(const float*, std::size_t, const MessagePlace&, cudaStream_t);
template Message message_of<bf16>(const bf16*, std::size_t, const MessagePlace&, cudaStream_t);
template Message message_of<fp16>(const fp16*, std::size_t, const MessagePlace&, cudaStream_t);

}  // namespace scalelab::cuda
