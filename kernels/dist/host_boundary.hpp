// Stage 05's messages on a GPU chunk (gpu_pipeline_chunk.hpp, gpu_tp_chunk.hpp): the executor's
// messages are fp32 host buffers over the host communicator, so a chunk computing on the GPU
// copies what it receives into the device (narrowed to F: exact, as the sender's device held the
// values in F) and what it sends out of it (widened to fp32). Both copies run on the chunk's
// stream and wait for it, so the host reads or frees its side right after. The received tensor's
// device buffer is reused while its size stays the same, and counted as communication memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/memory.hpp"
#include "kernels/core/device_buffer.hpp"
#include "kernels/core/dtype.hpp"
#include "precision/half.hpp"

namespace scalelab::cuda {

// The GPU chunks have no split backward: --schedule zb-h1 is refused (a ConfigError naming it;
// PipelineStrategy refuses it on a GPU before any chunk is asked).
[[noreturn]] void refuse_split_backward_on_gpu();

// bytes between host and device on `stream`, then waits for it.
void copy_and_wait(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);

template <typename F>
class HostBoundary {
 public:
  HostBoundary(cudaStream_t stream, MemoryTracker* device) : stream_(stream), device_(device) {}
  // n fp32 values from the host into the device (narrowed to F); valid until the next call.
  const F* to_device(const float* host, std::size_t n);
  // n values of F from the device into `out` on the host (widened to fp32).
  void to_host(const F* device, std::size_t n, std::vector<float>& out);

 private:
  cudaStream_t stream_;
  MemoryTracker* device_;
  DeviceBuffer<F> received_;             // the received activations or gradient (communication)
  std::vector<std::uint16_t> narrowed_;  // half staging on the host (bf16, fp16)
};

}  // namespace scalelab::cuda
