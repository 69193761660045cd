// Array comparison for tests: reports what differed, where, and by how much, so that a failing
// assertion reads as a hint ("dqkv[513] = 0.12 but expected 0.31, max rel err 0.6").
#pragma once

#include <cmath>
#include <cstddef>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace scalelab_test {

struct Comparison {
  bool ok = true;
  std::size_t count = 0;       // elements compared
  std::size_t mismatches = 0;  // elements outside the tolerance
  std::size_t first_bad = 0;   // index of the first mismatch
  double got_at_first = 0, want_at_first = 0;
  double max_abs_err = 0, max_rel_err = 0;
  std::string what;
  std::string message() const {
    std::ostringstream os;
    os << what << ": " << (ok ? "match" : "MISMATCH") << " over " << count << " elements; max abs err " << max_abs_err
       << ", max rel err " << max_rel_err;
    if (!ok)
      os << "; " << mismatches << " outside tolerance, first at index " << first_bad << ": got " << got_at_first
         << ", expected " << want_at_first;
    return os.str();
  }
};

// |got - want| <= atol + rtol * |want|, elementwise (NaN never matches).
template <typename A, typename B>
Comparison compare_close(const std::string& what, const A* got, const B* want, std::size_t n, double rtol,
                         double atol) {
  Comparison c;
  c.what = what;
  c.count = n;
  for (std::size_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const double err = std::fabs(g - w);
    const double rel = err / std::fmax(std::fabs(w), 1e-30);
    if (err > c.max_abs_err || std::isnan(err)) c.max_abs_err = err;
    if (std::fabs(w) > atol && rel > c.max_rel_err) c.max_rel_err = rel;
    if (!(err <= atol + rtol * std::fabs(w))) {
      if (c.ok) {
        c.first_bad = i;
        c.got_at_first = g;
        c.want_at_first = w;
      }
      c.ok = false;
      ++c.mismatches;
    }
  }
  return c;
}

// ||got - want|| / ||want|| over n elements (when ||want|| is 0: ||got||): one number per
// tensor where elementwise bounds are too strict (sums in another order, atomics on a GPU).
template <typename A, typename B>
double relative_norm_error(const A* got, const B* want, std::size_t n) {
  double d = 0, r = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    d += (g - w) * (g - w);
    r += w * w;
  }
  return r > 0 ? std::sqrt(d / r) : std::sqrt(d);
}

// Bitwise equality of two float arrays (so that -0 vs +0 and NaN payloads count).
template <typename F>
Comparison compare_bitwise(const std::string& what, const F* got, const F* want, std::size_t n) {
  Comparison c;
  c.what = what + " (bitwise)";
  c.count = n;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(F)) != 0) {
      const double err = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
      if (err > c.max_abs_err) c.max_abs_err = err;
      if (c.ok) {
        c.first_bad = i;
        c.got_at_first = got[i];
        c.want_at_first = want[i];
      }
      c.ok = false;
      ++c.mismatches;
    }
  }
  return c;
}

// A buffer that runs on past the n elements a function was given, filled with `guard`: every
// element past n must still hold it bitwise, or the function wrote past its end (the message
// names the first such element, counted from n, and what it holds).
template <typename F>
Comparison compare_guards(const std::string& what, const std::vector<F>& buffer, std::size_t n, F guard) {
  const std::vector<F> guards(buffer.size() - n, guard);
  return compare_bitwise(what + ": the guard values past its " + std::to_string(n) + " elements", buffer.data() + n,
                         guards.data(), guards.size());
}

// The largest |v[i]|: the scale of the absolute term of a tolerance (atol = k * max|want|).
inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::fmax(m, std::fabs(static_cast<double>(x)));
  return m;
}

}  // namespace scalelab_test

// CHECK_MATCH(comparison): a Catch2 assertion that prints the comparison's message.
#define CHECK_MATCH(cmp)   \
  do {                     \
    const auto _c = (cmp); \
    INFO(_c.message());    \
    CHECK(_c.ok);          \
  } while (0)
#define REQUIRE_MATCH(cmp) \
  do {                     \
    const auto _c = (cmp); \
    INFO(_c.message());    \
    REQUIRE(_c.ok);        \
  } while (0)
