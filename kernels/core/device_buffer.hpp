// DeviceBuffer<T>: the GPU twin of Buffer<T> (core/memory.hpp). An owning, zero-initialised
// array in device memory that reports its bytes to the same MemoryTracker under a category, so
// a GPU run prints the same memory table as a CPU run and the stage formulas check both.
//
// Allocation is stream-ordered (cudaMallocAsync on the legacy default stream) from the device's
// default memory pool. That pool counts the bytes in use and their high-water mark itself
// (cudaMemPoolAttrUsedMemCurrent/High), which gives the device's own figure that the tracker's
// peak is cross-checked against (core/device_memory.hpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "core/memory.hpp"
#include "kernels/core/cuda_check.hpp"

namespace scalelab::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // count elements of T on the current device, zero-filled; a null tracker means "not counted".
  DeviceBuffer(std::size_t count, MemCategory category, MemoryTracker* tracker) : size_(count), category_(category) {
    if (count) {
      void* p = nullptr;
      SCALELAB_CUDA_CHECK(cudaMallocAsync(&p, bytes(), cudaStreamLegacy));
      data_ = static_cast<T*>(p);
      SCALELAB_CUDA_CHECK(cudaMemsetAsync(data_, 0, bytes(), cudaStreamLegacy));
    }
    tracker_ = tracker;  // set last: a failed allocation above was never counted
    if (tracker_) tracker_->on_alloc(category_, bytes());
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      category_ = o.category_;
      tracker_ = std::exchange(o.tracker_, nullptr);
    }
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }
  MemCategory category() const { return category_; }

  // Synchronous copies between this buffer and host memory (count elements from the start).
  void copy_from_host(const T* host, std::size_t count) {
    SCALELAB_CHECK(count <= size_, "copying ", count, " elements into a device buffer of ", size_);
    if (count) SCALELAB_CUDA_CHECK(cudaMemcpy(data_, host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  void copy_from_host(const std::vector<T>& host) { copy_from_host(host.data(), host.size()); }
  void copy_to_host(T* host, std::size_t count) const {
    SCALELAB_CHECK(count <= size_, "copying ", count, " elements out of a device buffer of ", size_);
    if (count) SCALELAB_CUDA_CHECK(cudaMemcpy(host, data_, count * sizeof(T), cudaMemcpyDeviceToHost));
  }
  std::vector<T> to_host() const {
    std::vector<T> out(size_);
    copy_to_host(out.data(), size_);
    return out;
  }

 private:
  void release() noexcept {
    if (tracker_) tracker_->on_free(category_, bytes());
    if (data_) cudaFreeAsync(data_, cudaStreamLegacy);  // ordered after all earlier work; no throw
    data_ = nullptr;
    size_ = 0;
    tracker_ = nullptr;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
  MemCategory category_ = MemCategory::kWorkspace;
  MemoryTracker* tracker_ = nullptr;
};

// A device buffer holding a copy of host data.
template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& host, MemCategory category, MemoryTracker* tracker) {
  DeviceBuffer<T> d(host.size(), category, tracker);
  d.copy_from_host(host);
  return d;
}

}  // namespace scalelab::cuda
