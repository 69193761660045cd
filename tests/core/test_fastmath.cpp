// fast_expf / fast_tanhf (core/fastmath.hpp) against the double-precision functions, in ulps,
// over a sampled scan of every float (every 4099th bit pattern) plus the edge cases.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/fastmath.hpp"

namespace {
float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Error in units of the float spacing at the exact result.
double ulps(float got, double exact) {
  if (std::isinf(exact) || exact == 0) return got == static_cast<float>(exact) ? 0 : 1e9;
  const float e = static_cast<float>(exact);
  const double spacing = std::nextafter(std::fabs(e), std::numeric_limits<float>::infinity()) - std::fabs(e);
  return std::fabs(got - exact) / spacing;
}
}  // namespace

TEST_CASE("fast_expf and fast_tanhf stay within 1.5 ulp over the float range", "[fastmath]") {
  double worst_exp = 0, worst_tanh = 0;
  float at_exp = 0, at_tanh = 0;
  for (std::uint64_t u = 0; u < (std::uint64_t(1) << 32); u += 4099) {
    const float x = from_bits(static_cast<std::uint32_t>(u));
    if (std::isnan(x)) continue;
    const double ee = std::exp(static_cast<double>(x));
    if (ee < std::numeric_limits<float>::max() && ee > std::numeric_limits<float>::min()) {
      const double e = ulps(scalelab::fast_expf(x), ee);
      if (e > worst_exp) worst_exp = e, at_exp = x;
    }
    const double t = ulps(scalelab::fast_tanhf(x), std::tanh(static_cast<double>(x)));
    if (std::fabs(x) > 1e-30f && t > worst_tanh) worst_tanh = t, at_tanh = x;
  }
  INFO("fast_expf worst " << worst_exp << " ulp at x = " << at_exp << "; fast_tanhf worst " << worst_tanh
                          << " ulp at x = " << at_tanh);
  CHECK(worst_exp <= 1.5);
  CHECK(worst_tanh <= 1.5);
  CHECK(std::isnan(scalelab::fast_expf(std::numeric_limits<float>::quiet_NaN())));
  CHECK(scalelab::fast_expf(-200.f) == 0.f);
  CHECK(std::isinf(scalelab::fast_expf(200.f)));
  CHECK(scalelab::fast_tanhf(30.f) == 1.f);
  CHECK(scalelab::fast_tanhf(-30.f) == -1.f);
}
