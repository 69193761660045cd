// Device memory figures from cudaMemGetInfo and the default memory pool's attributes.
#include "kernels/core/device_memory.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>

#include "kernels/core/cuda_check.hpp"

namespace scalelab::cuda {

namespace {
cudaMemPool_t default_pool() {
  int dev = 0;
  SCALELAB_CUDA_CHECK(cudaGetDevice(&dev));
  cudaMemPool_t pool = nullptr;
  SCALELAB_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  return pool;
}
std::size_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  std::uint64_t value = 0;  // these attributes are cuuint64_t
  SCALELAB_CUDA_CHECK(cudaMemPoolGetAttribute(pool, attr, &value));
  return static_cast<std::size_t>(value);
}
}  // namespace

DeviceMemoryInfo device_memory_info() {
  DeviceMemoryInfo info;
  // Earlier stream-ordered allocations and frees must have happened before we read the counters.
  SCALELAB_CUDA_CHECK(cudaDeviceSynchronize());
  SCALELAB_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  cudaMemPool_t pool = default_pool();
  info.pool_used = pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent);
  info.pool_used_high = pool_attribute(pool, cudaMemPoolAttrUsedMemHigh);
  return info;
}

DeviceMemoryProbe::DeviceMemoryProbe() {
  SCALELAB_CUDA_CHECK(cudaDeviceSynchronize());
  cudaMemPool_t pool = default_pool();
  std::uint64_t zero = 0;  // writing 0 resets the high-water mark to the current usage
  SCALELAB_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  baseline_ = pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent);
}

DeviceMemoryCheck DeviceMemoryProbe::check(const MemoryTracker& tracker, std::size_t slack_bytes) const {
  const DeviceMemoryInfo info = device_memory_info();
  DeviceMemoryCheck c;
  c.tracked_current = tracker.current_total();
  c.tracked_peak = tracker.peak_total();
  c.device_current = info.pool_used >= baseline_ ? info.pool_used - baseline_ : 0;
  c.device_peak = info.pool_used_high >= baseline_ ? info.pool_used_high - baseline_ : 0;
  c.slack_bytes = slack_bytes;
  auto within = [slack_bytes](std::size_t tracked, std::size_t device) {
    return device >= tracked && device <= tracked + slack_bytes;
  };
  c.ok = within(c.tracked_current, c.device_current) && within(c.tracked_peak, c.device_peak);
  return c;
}

std::string DeviceMemoryCheck::report() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "device memory %s: tracker current %zu B, peak %zu B; device pool current %zu B, peak %zu B "
                "(allowed excess %zu B)",
                ok ? "matches the tracker" : "DOES NOT match the tracker", tracked_current, tracked_peak,
                device_current, device_peak, slack_bytes);
  return buf;
}

}  // namespace scalelab::cuda
