// The memory tracker: every buffer scalelab allocates carries a category, so a run can print
// where its bytes went (params, grads, optimizer state, activations, ...) and its peaks.
// Stage 00 introduces it; every later stage is measured with it against a formula.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace scalelab {

enum class MemCategory : int { kParams, kGrads, kOptimizer, kActivations, kComm, kWorkspace, kCount };
constexpr int kMemCategoryCount = static_cast<int>(MemCategory::kCount);
const char* mem_category_name(MemCategory c);

// Current and peak bytes per category, plus the peak of the total. One tracker per model/run
// (it is passed around, never global), so tests can measure exactly what one step allocated.
class MemoryTracker {
 public:
  void on_alloc(MemCategory c, std::size_t bytes);
  void on_free(MemCategory c, std::size_t bytes);
  std::size_t current(MemCategory c) const { return current_[idx(c)]; }
  std::size_t peak(MemCategory c) const { return peak_[idx(c)]; }
  std::size_t current_total() const { return current_total_; }
  std::size_t peak_total() const { return peak_total_; }
  // Forget the peaks (set them to the current values), e.g. to measure one step alone.
  void reset_peaks();
  // A table with one row per category: current and peak in MiB and bytes.
  std::string report() const;

 private:
  static int idx(MemCategory c) { return static_cast<int>(c); }
  std::array<std::size_t, kMemCategoryCount> current_{};
  std::array<std::size_t, kMemCategoryCount> peak_{};
  std::size_t current_total_ = 0;
  std::size_t peak_total_ = 0;
};

// An owning, tracked, zero-initialised array of T on the host (RAII: freed and un-counted on
// destruction). Move-only. A null tracker means "not counted" (used for scratch in tests).
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(std::size_t count, MemCategory category, MemoryTracker* tracker)
      : data_(count ? new T[count]() : nullptr), size_(count), category_(category), tracker_(tracker) {
    if (tracker_) tracker_->on_alloc(category_, bytes());
  }
  ~Buffer() { release(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
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
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  void release() {
    if (tracker_) tracker_->on_free(category_, bytes());
    delete[] data_;
    data_ = nullptr;
    size_ = 0;
    tracker_ = nullptr;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
  MemCategory category_ = MemCategory::kWorkspace;
  MemoryTracker* tracker_ = nullptr;
};

}  // namespace scalelab
