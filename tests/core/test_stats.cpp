// median (core/stats.hpp): element n/2 of the sorted samples, checked against hand-sorted lists.
#include <catch2/catch.hpp>

#include <vector>

#include "core/stats.hpp"

TEST_CASE("median is element n/2 of the sorted samples", "[stats]") {
  using scalelab::median;
  CHECK(median({}) == 0.0);
  CHECK(median({4.5}) == 4.5);
  CHECK(median({3, 1, 2}) == 2.0);                   // sorted 1 2 3
  CHECK(median({9, 1}) == 9.0);                      // sorted 1 9: the upper middle, not 5
  CHECK(median({7, 3, 5, 1}) == 5.0);                // sorted 1 3 5 7: element 2
  CHECK(median({2, 2, 8, 2, 8}) == 2.0);             // ties: sorted 2 2 2 8 8
  CHECK(median({-1.5, 10, 0.25, 3, -7, 4}) == 3.0);  // sorted -7 -1.5 0.25 3 4 10: element 3
  // The caller's samples are left as they were (taken by value).
  const std::vector<double> v = {5, 4, 3, 2, 1};
  CHECK(median(v) == 3.0);
  CHECK(v == std::vector<double>{5, 4, 3, 2, 1});
}
