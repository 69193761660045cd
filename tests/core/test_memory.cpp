// The memory tracker counts by category, keeps peaks, and un-counts on destruction.
#include <catch2/catch.hpp>

#include "core/memory.hpp"

using namespace scalelab;

TEST_CASE("memory tracker counts current and peak bytes per category", "[memory]") {
  MemoryTracker mt;
  {
    Buffer<float> a(100, MemCategory::kParams, &mt);
    Buffer<double> b(10, MemCategory::kActivations, &mt);
    CHECK(mt.current(MemCategory::kParams) == 400);
    CHECK(mt.current(MemCategory::kActivations) == 80);
    CHECK(mt.current_total() == 480);
    Buffer<double> moved = std::move(b);  // a move must not count twice
    CHECK(mt.current(MemCategory::kActivations) == 80);
  }
  CHECK(mt.current_total() == 0);
  CHECK(mt.peak(MemCategory::kParams) == 400);
  CHECK(mt.peak_total() == 480);
  mt.reset_peaks();
  CHECK(mt.peak_total() == 0);
}
