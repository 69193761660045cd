// A pipeline message in fp32 or half, in host or device memory (stage 05).
#include "dist/pipeline_message.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "precision/half.hpp"
#include "precision/half_type.hpp"

namespace scalelab {

namespace {

HalfFormat message_half_format(DataType type) {
  const std::optional<HalfFormat> format = half_format_of(type);
  SCALELAB_CHECK(format.has_value(), "a pipeline message is fp32, bf16 or fp16");
  return *format;
}

}  // namespace

Message::Message(std::size_t count, DataType type, const MessagePlace& place)
    : count_(count), type_(type), tracker_(place.host) {
  if (type != DataType::kFloat32) message_half_format(type);  // checks the type
  if (place.on_device()) {
    device_ = place.device->allocate(bytes());
    SCALELAB_CHECK(device_ || count == 0, "no device memory for a pipeline message of ", bytes(), " bytes");
    return;
  }
  if (type == DataType::kFloat32)
    fp32_ = Buffer<float>(count, MemCategory::kComm, tracker_);
  else
    half_ = Buffer<std::uint16_t>(count, MemCategory::kComm, tracker_);
}

Message Message::of(const float* values, std::size_t count, DataType type, MemoryTracker* tracker) {
  Message m(count, type, MessagePlace{tracker, nullptr});
  if (type == DataType::kFloat32)
    std::copy_n(values, count, m.fp32_.data());
  else
    float_to_half(m.half_.data(), values, count, message_half_format(type));
  return m;
}

void* Message::data() {
  if (device_) return device_.get();
  return type_ == DataType::kFloat32 ? static_cast<void*>(fp32_.data()) : half_.data();
}

const float* Message::as_float() {
  if (count_ == 0) return nullptr;
  SCALELAB_CHECK(!device_, "a device message is read by the GPU chunk that takes it, not as host fp32");
  if (type_ != DataType::kFloat32 && fp32_.size() == 0) {
    fp32_ = Buffer<float>(count_, MemCategory::kComm, tracker_);
    half_to_float(fp32_.data(), half_.data(), count_, message_half_format(type_));
  }
  return fp32_.data();
}

}  // namespace scalelab
