// Finite-difference gradient checks in double precision. For a layer y = f(x1, x2, ...), the
// scalar objective is L = sum_i w_i y_i with fixed random weights w, so dL/dy = w is what the
// layer's backward receives, and each input's analytic gradient is compared with
// (L(x + h e_j) - L(x - h e_j)) / 2h for every element j.
#pragma once

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.hpp"

namespace scalelab_test {

using Vec = std::vector<double>;

inline Vec random_vec(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  scalelab::Rng rng(seed);
  Vec v(n);
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

// What a backward added to a gradient buffer that held `before`. The tests start accumulated
// gradients (+=) from non-zero values and check what was added: a backward that overwrote the
// buffer (=, e.g. beta = 0 in a GEMM) would pass from zero, since 0 + g = g.
inline Vec added(const Vec& after, const Vec& before) {
  Vec d(after.size());
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = after[i] - before[i];
  return d;
}

struct FdResult {
  bool ok = true;
  double worst_rel = 0;  // |analytic - numeric| / max(|numeric|, floor)
  std::size_t worst_index = 0;
  double analytic_at_worst = 0, numeric_at_worst = 0;
  std::string message(const std::string& what) const {
    std::ostringstream os;
    os << what << ": worst relative error " << worst_rel << " at element " << worst_index << " (backward "
       << analytic_at_worst << ", finite difference " << numeric_at_worst << ")";
    return os.str();
  }
};

// objective(): L for the current contents of x (which the check perturbs in place).
inline FdResult check_fd(Vec& x, const Vec& analytic, const std::function<double()>& objective, double tol,
                         double h = 1e-6) {
  FdResult r;
  double scale = 1e-3;  // errors are relative to the largest gradient of this input
  for (double a : analytic) scale = std::max(scale, std::fabs(a));
  for (std::size_t j = 0; j < x.size(); ++j) {
    const double saved = x[j];
    x[j] = saved + h;
    const double up = objective();
    x[j] = saved - h;
    const double down = objective();
    x[j] = saved;
    const double numeric = (up - down) / (2 * h);
    const double rel = std::fabs(analytic[j] - numeric) / scale;
    if (rel > r.worst_rel) {
      r.worst_rel = rel;
      r.worst_index = j;
      r.analytic_at_worst = analytic[j];
      r.numeric_at_worst = numeric;
    }
  }
  r.ok = r.worst_rel <= tol;
  return r;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace scalelab_test

// CHECK_FD(result, "what"): a Catch2 check that prints the worst element.
#define CHECK_FD(res, what) \
  do {                      \
    const auto _r = (res);  \
    INFO(_r.message(what)); \
    CHECK(_r.ok);           \
  } while (0)
