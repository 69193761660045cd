// A seeded, deterministic random number generator (SplitMix64) whose whole state is one
// 64-bit integer, so training checkpoints can save and restore it exactly. The same seed gives
// the same numbers on every machine and compiler (unlike std::normal_distribution).
#pragma once

#include <cmath>
#include <cstdint>

namespace scalelab {

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) : state_(seed) {}

  std::uint64_t next_u64() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  std::uint64_t below(std::uint64_t n) { return next_u64() % n; }
  // Standard normal by Box-Muller; uses two uniforms per sample (no cached second value, so
  // the state stays a single integer).
  double normal() {
    const double u1 = 1.0 - uniform();  // in (0, 1]: log is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  std::uint64_t state() const { return state_; }
  void set_state(std::uint64_t s) { state_ = s; }

 private:
  std::uint64_t state_;
};

}  // namespace scalelab
