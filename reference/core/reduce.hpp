// Sum, dot product and maximum of a row, for the row-wise layers (LayerNorm, softmax) of stage
// 00's performance work. A plain `for (...) s += x[i];` is one long chain of dependent additions:
// the compiler may not reorder it into SIMD code (that would change the rounding), so it runs
// at one addition per 3-4 cycles. Here the row is summed in kLanes interleaved partial sums,
// lane j taking elements j, j + kLanes, j + 2 kLanes, ..., and the lanes are added in a fixed
// tree at the end. The compiler turns the lanes into SIMD registers; the order of every addition
// is fixed by the source, so the result is the same bits on every run and every x86-64 target
// (it differs from the one-chain sum only in rounding, and is usually closer to the exact sum).
#pragma once

#include <cstddef>

namespace scalelab {

namespace detail {
constexpr int kLanes = 16;  // 4 SSE / 2 AVX / 1 AVX-512 register of floats

// ((p0 + p8) + (p4 + p12)) + ... : a fixed pairwise tree over the lanes.
template <typename F>
inline F combine_lanes(F* part) {
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) part[j] += part[j + width];
  return part[0];
}
}  // namespace detail

// term(0) + term(1) + ... + term(n-1), for a term computed from the index, e.g.
//   sum_over(C, [&](int c) { return d[c] * weight[c]; })
template <typename F, typename Term>
inline F sum_over(int n, Term term) {
  F part[detail::kLanes] = {};
  int i = 0;
  for (; i + detail::kLanes <= n; i += detail::kLanes)
    for (int j = 0; j < detail::kLanes; ++j) part[j] += term(i + j);
  for (int j = 0; i < n; ++i, ++j) part[j] += term(i);
  return detail::combine_lanes(part);
}

// x[0] + ... + x[n-1]
template <typename F>
inline F reduce_sum(const F* x, int n) {
  return sum_over<F>(n, [x](int i) { return x[i]; });
}

// x[0] * y[0] + ... + x[n-1] * y[n-1]
template <typename F>
inline F reduce_dot(const F* x, const F* y, int n) {
  return sum_over<F>(n, [x, y](int i) { return x[i] * y[i]; });
}

// max(x[0], ..., x[n-1]) for n >= 1. Exact, so the lanes change nothing but the speed.
template <typename F>
inline F reduce_max(const F* x, int n) {
  F part[detail::kLanes];
  for (int j = 0; j < detail::kLanes; ++j) part[j] = x[0];
  int i = 0;
  for (; i + detail::kLanes <= n; i += detail::kLanes)
    for (int j = 0; j < detail::kLanes; ++j) part[j] = x[i + j] > part[j] ? x[i + j] : part[j];
  for (; i < n; ++i) part[0] = x[i] > part[0] ? x[i] : part[0];
  for (int j = 1; j < detail::kLanes; ++j) part[0] = part[j] > part[0] ? part[j] : part[0];
  return part[0];
}

}  // namespace scalelab
