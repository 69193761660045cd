// Stage 05: one message between two pipeline ranks: a micro-batch's activations, or their
// gradient, in the type the chunks keep them in at their boundary: fp32, or under mixed
// precision (stage 03) bf16 or fp16, 2 bytes per element on the wire, as Megatron-LM sends
// them. The chunks compute on fp32 views of their inputs (values the half type holds exactly:
// the sending chunk stored them as half), so a half message is narrowed from fp32 when it is
// made and widened back for the receiving chunk, exactly both ways.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/datatype.hpp"
#include "core/memory.hpp"

namespace scalelab {

class Message {
 public:
  Message() = default;
  // count elements of `type` (kFloat32, kBFloat16 or kFloat16), zero, counted as communication
  // buffers in the tracker.
  Message(std::size_t count, DataType type, MemoryTracker* tracker);
  // A message holding `values` (count fp32 values that `type` holds exactly).
  static Message of(const float* values, std::size_t count, DataType type, MemoryTracker* tracker);

  void* data() { return type_ == DataType::kFloat32 ? static_cast<void*>(fp32_.data()) : half_.data(); }
  std::size_t size() const { return count_; }  // elements
  std::size_t bytes() const { return count_ * dtype_size(type_); }
  DataType type() const { return type_; }
  bool empty() const { return count_ == 0; }
  // The elements as fp32 (widened once, for a half message): what a chunk's forward or backward
  // reads. Null for an empty message.
  const float* as_float();

 private:
  std::size_t count_ = 0;
  DataType type_ = DataType::kFloat32;
  MemoryTracker* tracker_ = nullptr;
  Buffer<float> fp32_;          // a kFloat32 message; a half message's widened copy
  Buffer<std::uint16_t> half_;  // a half message
};

}  // namespace scalelab
