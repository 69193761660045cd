// The memory tracker against the device (kernels/core/device_memory.hpp): DeviceBuffers report
// their bytes to the tracker, the default memory pool counts what it handed out, and after a
// sequence of allocations and frees both must report the same current and peak bytes.
#include <catch2/catch.hpp>

#include <cstddef>
#include <optional>

#include "kernels/core/device_buffer.hpp"
#include "kernels/core/device_memory.hpp"

namespace {

using scalelab::MemCategory;
using scalelab::MemoryTracker;
using scalelab::cuda::DeviceBuffer;
using scalelab::cuda::DeviceMemoryProbe;

TEST_CASE("the tracker's peak equals the device pool's", "[gpu][memory]") {
  MemoryTracker tracker;
  const DeviceMemoryProbe probe;  // with the fresh tracker: both start level
  constexpr std::size_t kMiB = 1u << 20;
  std::size_t expected_peak = 0;
  {
    DeviceBuffer<float> params(6 * kMiB / 4, MemCategory::kParams, &tracker);
    DeviceBuffer<float> grads(6 * kMiB / 4, MemCategory::kGrads, &tracker);
    std::optional<DeviceBuffer<float>> activations;
    activations.emplace(20 * kMiB / 4, MemCategory::kActivations, &tracker);
    expected_peak = 32 * kMiB;  // params + grads + activations, all live together
    activations.reset();        // freed: the peak stays, current falls
    DeviceBuffer<double> optimizer(4 * kMiB / 8, MemCategory::kOptimizer, &tracker);

    const auto live = probe.check(tracker, 0);
    INFO(live.report());
    CHECK(live.tracked_peak == expected_peak);
    CHECK(live.tracked_current == 16 * kMiB);
    // Sizes here are whole MiB, so the pool has no rounding to add: the figures are equal.
    CHECK(live.device_peak == live.tracked_peak);
    CHECK(live.device_current == live.tracked_current);
  }
  // Everything freed: current back to zero on both sides, the peak unchanged.
  const auto after = probe.check(tracker, 0);
  INFO(after.report());
  CHECK(after.tracked_current == 0);
  CHECK(after.device_current == 0);
  CHECK(after.device_peak == expected_peak);
  CHECK(after.ok);
}

TEST_CASE("odd-sized buffers: the pool exceeds the tracker by its rounding alone", "[gpu][memory]") {
  MemoryTracker tracker;
  const DeviceMemoryProbe probe;
  {
    // 3 bytes, a prime number of floats, 1000+3 bf16-sized shorts: the pool rounds each up.
    DeviceBuffer<unsigned char> a(3, MemCategory::kWorkspace, &tracker);
    DeviceBuffer<float> b(1000003, MemCategory::kActivations, &tracker);
    DeviceBuffer<unsigned short> c(1003, MemCategory::kGrads, &tracker);
    const std::size_t slack = 3 * 512;  // at most 512 bytes of rounding per buffer
    const auto check = probe.check(tracker, slack);
    INFO(check.report());
    CHECK(check.tracked_peak == 3 + 4 * 1000003 + 2 * 1003);
    CHECK(check.ok);
  }
}

}  // namespace
