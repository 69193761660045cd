// Stage 05's messages on a GPU (dist/pipeline_message.hpp): device memory for them, and what the
// GPU chunks (gpu_pipeline_chunk.hpp, gpu_tp_chunk.hpp) do at their boundary.
//
//   receive   the communicator (NCCL, or host staging) writes the message and returns once it is
//             complete; the chunk's forward (or backward) copies it into its own activations on
//             its stream and waits for the stream before returning, so the executor may free
//             the message, and its memory go to the next receive, right after.
//   send      the chunk copies its output (or input gradient) into a new message on its stream
//             and waits for it, so a communicator on any stream reads the finished values.
//
// Messages keep the boundary type F (fp32, bf16, fp16): device to device, nothing is widened.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <memory>

#include "core/memory.hpp"
#include "dist/pipeline_message.hpp"
#include "dist/pipeline_strategy.hpp"
#include "kernels/core/device_buffer.hpp"
#include "kernels/core/dtype.hpp"

namespace scalelab::cuda {

// Device memory for messages: blocks reused by size (a step sends messages of one or two sizes,
// so after the first micro-batches nothing is allocated), counted as communication memory in
// `device`, which must outlive the pool. A message still held when the pool goes frees its block.
class DeviceMessagePool final : public DeviceMessageMemory {
 public:
  explicit DeviceMessagePool(MemoryTracker* device);
  std::shared_ptr<void> allocate(std::size_t bytes) override;

 private:
  struct Free {
    std::multimap<std::size_t, DeviceBuffer<unsigned char>> blocks;  // by bytes
  };
  MemoryTracker* device_;
  std::shared_ptr<Free> free_;  // the messages' deleters return their blocks here while it lives
};

// The messages of a pipeline whose ranks share one GPU (or have no NCCL): host staging over a
// copy of the pipeline group pp (its own counters, collective over pp), and a DeviceMessagePool
// counting in `device`. scalelab train makes the NCCL form itself (apps/scalelab/device_models.cpp).
PipelineMessages make_staged_pipeline_messages(Communicator& pp, MemoryTracker* device);

// The GPU chunks have no split backward: --schedule zb-h1 is refused (a ConfigError naming it;
// PipelineStrategy refuses it on a GPU before any chunk is asked).
[[noreturn]] void refuse_split_backward_on_gpu();

// bytes between host and device (or within the device) on `stream`, then waits for it.
void copy_and_wait(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);

// A received message's elements for a chunk computing in F: checks that it is a device message
// of n elements of F's boundary type (an Error naming `what` otherwise).
template <typename F>
const F* message_input(Message& message, std::size_t n, const char* what);

// A message of n elements of F in `place` (device memory) holding `values` (device, written by
// work on `stream`): copied on the stream, which is then waited for.
template <typename F>
Message message_of(const F* values, std::size_t n, const MessagePlace& place, cudaStream_t stream);

}  // namespace scalelab::cuda
