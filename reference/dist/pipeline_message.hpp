// Stage 05: one message between two pipeline ranks: a micro-batch's activations, or their
// gradient, in the type the chunks keep them in at their boundary: fp32, or under mixed
// precision (stage 03) bf16 or fp16, 2 bytes per element on the wire, as Megatron-LM sends
// them.
//
// Where it lives is the pipeline's choice (MessagePlace):
//   host memory    chunks computing on the CPU, over MPI. They compute on fp32 views of their
//                  inputs (values the half type holds exactly: the sending chunk stored them as
//                  half), so a half message is narrowed from fp32 when it is made and widened
//                  back for the receiving chunk, exactly both ways.
//   device memory  chunks computing on a GPU, over a communicator that moves device memory
//                  (NCCL, or host staging where ranks share a GPU): the chunk writes its output
//                  into the message and reads its input from it, in the boundary type, and the
//                  bytes go from GPU to GPU without the host touching them. The memory comes
//                  from a DeviceMessageMemory (kernels/dist/device_messages.hpp on a GPU; the
//                  tests' twin is host memory standing in for it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/datatype.hpp"
#include "core/memory.hpp"

namespace scalelab {

// Device memory for messages: bytes that stay valid while the returned pointer is held.
class DeviceMessageMemory {
 public:
  virtual ~DeviceMessageMemory() = default;
  virtual std::shared_ptr<void> allocate(std::size_t bytes) = 0;
};

// Where a pipeline's messages live: host memory counted in `host`, or (device set) device memory.
struct MessagePlace {
  MemoryTracker* host = nullptr;
  DeviceMessageMemory* device = nullptr;
  bool on_device() const { return device != nullptr; }
};

class Message {
 public:
  Message() = default;
  // count elements of `type` (kFloat32, kBFloat16 or kFloat16) in `place` (host: zero, counted as
  // communication buffers in its tracker; device: uninitialised).
  Message(std::size_t count, DataType type, const MessagePlace& place);
  // A host message holding `values` (count fp32 values that `type` holds exactly).
  static Message of(const float* values, std::size_t count, DataType type, MemoryTracker* tracker);

  // The elements in `type`: host or device memory (on_device()).
  void* data();
  std::size_t size() const { return count_; }  // elements
  std::size_t bytes() const { return count_ * dtype_size(type_); }
  DataType type() const { return type_; }
  bool empty() const { return count_ == 0; }
  bool on_device() const { return device_ != nullptr; }
  // A host message's elements as fp32 (widened once, for a half message): what a chunk computing
  // on the CPU reads. Null for an empty message.
  const float* as_float();

 private:
  std::size_t count_ = 0;
  DataType type_ = DataType::kFloat32;
  MemoryTracker* tracker_ = nullptr;
  Buffer<float> fp32_;            // a host kFloat32 message; a host half message's widened copy
  Buffer<std::uint16_t> half_;    // a host half message
  std::shared_ptr<void> device_;  // a device message
};

}  // namespace scalelab
