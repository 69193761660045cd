// The host side of the kernel tests (see kernel_checks.hpp).
#include "kernel_checks.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>

#include "model/layers/crossentropy.hpp"

namespace scalelab_kernel_test {

std::uint64_t seed_for(const std::string& label) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64 bits
  for (unsigned char c : label) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::vector<float> random_values(std::size_t n, Rng& rng, float lo, float hi) {
  std::vector<float> x(n);
  for (float& v : x) {
    const float magnitude = lo + (hi - lo) * static_cast<float>(rng.uniform());
    v = rng.below(2) ? magnitude : -magnitude;
  }
  return x;
}

std::vector<int> random_ints(std::size_t n, Rng& rng, int bound) {
  std::vector<int> x(n);
  for (int& v : x) v = static_cast<int>(rng.below(static_cast<std::uint64_t>(bound)));
  return x;
}

CrossEntropyCase crossentropy_case(int N, int V, std::vector<float> logits, Rng& rng) {
  const std::size_t NV = static_cast<std::size_t>(N) * V;
  CrossEntropyCase c{N, V, std::move(logits), random_ints(N, rng, V), 1.0f / static_cast<float>(N), {}, {}, {}, 0.0f};
  c.probs.resize(NV);
  c.losses.resize(N);
  c.dlogits.resize(NV);
  c.mean_loss = scalelab::crossentropy_forward(c.probs.data(), c.losses.data(), c.logits.data(), c.targets.data(), N,
                                               V);
  scalelab::crossentropy_backward(c.dlogits.data(), c.probs.data(), c.targets.data(), c.dloss, N, V);
  return c;
}

int padded_stride(int cols) { return (cols / 128 + 1) * 128; }

std::vector<float> pad_rows(const std::vector<float>& x, int rows, int cols, int ld) {
  REQUIRE(x.size() == static_cast<std::size_t>(rows) * cols);
  REQUIRE(ld >= cols);
  std::vector<float> out(static_cast<std::size_t>(rows) * ld, NAN);
  for (int i = 0; i < rows; ++i)
    std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(i) * cols, cols,
                out.begin() + static_cast<std::ptrdiff_t>(i) * ld);
  return out;
}

std::vector<float> unpad_rows(const std::vector<float>& x, int rows, int cols, int ld) {
  REQUIRE(x.size() == static_cast<std::size_t>(rows) * ld);
  std::vector<float> out(static_cast<std::size_t>(rows) * cols);
  for (int i = 0; i < rows; ++i)
    std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(i) * ld, cols,
                out.begin() + static_cast<std::ptrdiff_t>(i) * cols);
  return out;
}

void check_padding_unwritten(const std::string& what, const std::vector<float>& x, int rows, int cols, int ld) {
  REQUIRE(x.size() == static_cast<std::size_t>(rows) * ld);
  std::size_t written = 0, first = 0;
  for (int i = 0; i < rows; ++i)
    for (int j = cols; j < ld; ++j) {
      const std::size_t at = static_cast<std::size_t>(i) * ld + j;
      if (!std::isnan(x[at]) && written++ == 0) first = at;
    }
  INFO(what << ": " << written << " of " << static_cast<std::size_t>(rows) * (ld - cols)
            << " padding elements (columns " << cols << ".." << ld - 1 << ") were written, first at index " << first
            << " (value " << (written ? x[first] : 0.0f) << ")");
  CHECK(written == 0);
}

Closeness closeness(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                    double tolerance) {
  std::ostringstream os;
  os << what << ": ";
  if (got.size() != want.size()) {
    os << got.size() << " elements from the kernel but " << want.size() << " from the CPU";
    return {NAN, os.str()};
  }
  double diff2 = 0, ref2 = 0, worst = -1;
  std::size_t worst_at = 0, nonfinite = 0, first_nonfinite = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) && std::isfinite(want[i])) {
      if (nonfinite++ == 0) first_nonfinite = i;
      continue;
    }
    const double d = static_cast<double>(got[i]) - want[i];
    diff2 += d * d;
    ref2 += static_cast<double>(want[i]) * want[i];
    if (std::fabs(d) > worst) {
      worst = std::fabs(d);
      worst_at = i;
    }
  }
  // An all-zero reference (e.g. a gradient that must vanish) is compared absolutely.
  const double rel = nonfinite ? NAN : (ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2));
  os << "relative error " << rel << " (tolerance " << tolerance << ") over " << got.size() << " elements";
  if (worst >= 0)
    os << "; largest difference " << worst << " at index " << worst_at << " (kernel " << got[worst_at] << ", CPU "
       << want[worst_at] << ")";
  if (nonfinite)
    os << "; " << nonfinite << " non-finite kernel values (unwritten outputs stay NaN), first at index "
       << first_nonfinite << " (kernel " << got[first_nonfinite] << ", CPU " << want[first_nonfinite] << ")";
  return {rel, os.str()};
}

void check_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                 double tolerance) {
  const Closeness c = closeness(what, got, want, tolerance);
  INFO(c.report);
  CHECK(c.rel_err <= tolerance);  // false for NaN too
}

namespace {
template <typename Word>
std::string hex(Word w) {
  char buf[16];
  std::snprintf(buf, sizeof buf, sizeof(Word) == 2 ? "0x%04x" : "0x%08x", static_cast<unsigned>(w));
  return buf;
}
}  // namespace

void check_bitwise(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  std::size_t differ = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]) && differ++ == 0) first = i;
  std::ostringstream os;
  os << what << ": " << differ << " of " << got.size() << " elements differ bitwise";
  if (differ)
    os << ", first at index " << first << ": kernel " << got[first] << " ("
       << hex(std::bit_cast<std::uint32_t>(got[first])) << "), CPU " << want[first] << " ("
       << hex(std::bit_cast<std::uint32_t>(want[first])) << "), difference "
       << static_cast<double>(got[first]) - want[first];
  INFO(os.str());
  CHECK(differ == 0);
}

void check_bitwise16(const std::string& what, const std::vector<std::uint16_t>& got,
                     const std::vector<std::uint16_t>& want, const std::vector<float>& inputs) {
  REQUIRE(got.size() == want.size());
  REQUIRE(inputs.size() == want.size());
  std::size_t differ = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && differ++ == 0) first = i;
  std::ostringstream os;
  os << what << ": " << differ << " of " << got.size() << " conversions differ";
  if (differ)
    os << ", first at index " << first << ": input " << inputs[first] << " ("
       << hex(std::bit_cast<std::uint32_t>(inputs[first])) << ") gave kernel " << hex(got[first]) << ", CPU "
       << hex(want[first]);
  INFO(os.str());
  CHECK(differ == 0);
}

}  // namespace scalelab_kernel_test
