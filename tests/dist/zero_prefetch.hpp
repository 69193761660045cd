// Stage 07's prefetch, read from a step's timeline (fp32 and mixed ZeRO-3 alike): how many block
// gathers were still in flight when a later compute interval started, i.e. travelled while an
// earlier block computed.
#pragma once

#include <cstddef>
#include <vector>

#include "dist/timeline.hpp"

namespace scalelab_test {

inline std::size_t prefetched_gathers(const std::vector<scalelab::TimelineEvent>& events) {
  std::size_t prefetched = 0;
  for (const scalelab::TimelineEvent& e : events) {
    if (e.category != "comm" || e.name.rfind("gather block", 0) != 0) continue;
    for (const scalelab::TimelineEvent& c : events)
      if (c.category == "compute" && c.start_us >= e.start_us && c.start_us < e.start_us + e.duration_us) {
        ++prefetched;
        break;
      }
  }
  return prefetched;
}

}  // namespace scalelab_test
