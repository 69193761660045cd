// A pipeline message in fp32 or half (stage 05 with stage 03's mixed precision).
#include "dist/pipeline_message.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "precision/half.hpp"

namespace scalelab {

namespace {

HalfFormat half_format_of(DataType type) {
  SCALELAB_CHECK(type == DataType::kBFloat16 || type == DataType::kFloat16, "a pipeline message is fp32, bf16 or fp16");
  return type == DataType::kBFloat16 ? HalfFormat::kBF16 : HalfFormat::kFP16;
}

}  // namespace

Message::Message(std::size_t count, DataType type, MemoryTracker* tracker)
    : count_(count),
      type_(type),
      tracker_(tracker),
      fp32_(type == DataType::kFloat32 ? count : 0, MemCategory::kComm, tracker),
      half_(type == DataType::kFloat32 ? 0 : count, MemCategory::kComm, tracker) {
  if (type != DataType::kFloat32) half_format_of(type);  // checks the type
}

Message Message::of(const float* values, std::size_t count, DataType type, MemoryTracker* tracker) {
  Message m(count, type, tracker);
  if (type == DataType::kFloat32)
    std::copy_n(values, count, m.fp32_.data());
  else
    float_to_half(m.half_.data(), values, count, half_format_of(type));
  return m;
}

const float* Message::as_float() {
  if (count_ == 0) return nullptr;
  if (type_ != DataType::kFloat32 && fp32_.size() == 0) {
    fp32_ = Buffer<float>(count_, MemCategory::kComm, tracker_);
    half_to_float(fp32_.data(), half_.data(), count_, half_format_of(type_));
  }
  return fp32_.data();
}

}  // namespace scalelab
