// The cross-check of the memory tracker against the device (CUDA backend).
// The tracker counts what scalelab asked for; the device's default memory pool (which every
// DeviceBuffer allocates from) counts what it handed out, including its own rounding. A probe
// records the pool's usage when created; check() compares the growth since then, current and
// peak, with the tracker's figures. cudaMemGetInfo's view of the whole device (other processes,
// the CUDA context, cuBLAS) is reported beside it for context.
#pragma once

#include <cstddef>
#include <string>

#include "core/memory.hpp"

namespace scalelab::cuda {

struct DeviceMemoryInfo {
  std::size_t free_bytes = 0;      // cudaMemGetInfo: free on the device
  std::size_t total_bytes = 0;     // cudaMemGetInfo: the device's memory
  std::size_t pool_used = 0;       // default pool: bytes in use by allocations now
  std::size_t pool_used_high = 0;  // default pool: high-water mark of pool_used since its last reset
  std::size_t used_bytes() const { return total_bytes - free_bytes; }
};
DeviceMemoryInfo device_memory_info();

struct DeviceMemoryCheck {
  std::size_t tracked_current = 0, tracked_peak = 0;  // tracker: current_total(), peak_total()
  std::size_t device_current = 0, device_peak = 0;    // pool: growth since the probe was created
  std::size_t slack_bytes = 0;                        // allowed excess of device over tracker
  bool ok = false;                                    // tracked <= device <= tracked + slack, for current and peak
  std::string report() const;
};

class DeviceMemoryProbe {
 public:
  // Records the pool's current usage and resets its high-water mark. Create it together with a
  // fresh tracker (or call tracker.reset_peaks() at the same moment) so both start level.
  DeviceMemoryProbe();
  // slack_bytes: how much the pool may exceed the tracker (its per-allocation rounding; a few
  // hundred bytes per buffer, 2 MiB at most).
  DeviceMemoryCheck check(const MemoryTracker& tracker, std::size_t slack_bytes) const;
  std::size_t baseline() const { return baseline_; }

 private:
  std::size_t baseline_ = 0;
};

}  // namespace scalelab::cuda
