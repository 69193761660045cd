// Summary statistics of timing samples, shared by every benchmark and report (tokens/s of a
// training run, kernel and step timings on the GPU). Header-only: the GPU benchmarks use it too.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace scalelab {

// The median of `samples` as this project reports it: element n/2 of the sorted samples (for an
// even count, the upper of the two middle elements, so the median is always a measured value
// and never an average of two). 0 for no samples, which the reports print as such.
inline double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  const auto mid = samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2);
  std::nth_element(samples.begin(), mid, samples.end());  // the sorted vector's element n/2
  return *mid;
}

}  // namespace scalelab
