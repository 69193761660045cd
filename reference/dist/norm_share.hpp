// A rank's share of the whole model's gradient norm, when the model is spread over ranks (stages
// 05-07 and their compositions). Each rank sums the squares of its gradients in index order,
// leaving out the tensors another rank also holds and counts (the head's copy of the tied wte,
// a tensor-parallel rank's replicated tensors); the ranks' shares then add up to the whole
// model's sum of squares, every element counted once.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace scalelab {

// Ranges [begin, end) of a flat buffer, sorted, not overlapping.
using IndexRanges = std::vector<std::pair<std::size_t, std::size_t>>;

// The sum of squares of elements [begin, end) of a flat buffer in index order, without the
// elements inside `skip`, where `at` points to element `begin` (a chunk of the buffer).
inline double sum_squares_skipping_at(const float* at, std::size_t begin, std::size_t end, const IndexRanges& skip) {
  double s = 0;
  std::size_t i = begin;
  for (const auto& [skip_begin, skip_end] : skip) {
    for (; i < std::min(end, skip_begin); ++i) s += static_cast<double>(at[i - begin]) * at[i - begin];
    i = std::max(i, std::min(end, skip_end));
  }
  for (; i < end; ++i) s += static_cast<double>(at[i - begin]) * at[i - begin];
  return s;
}

// The same with g the whole buffer: g[begin, end).
inline double sum_squares_skipping(const float* g, std::size_t begin, std::size_t end, const IndexRanges& skip) {
  return sum_squares_skipping_at(g + begin, begin, end, skip);
}

}  // namespace scalelab
