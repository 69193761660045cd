// Stage 03: the two 16-bit floating-point formats of mixed-precision training, stored as raw
// 16-bit patterns, and their conversions to and from fp32, written by hand on the bit patterns.
//
//   format  sign  exponent  mantissa  largest finite     smallest normal  smallest subnormal
//   fp32     1       8         23     3.40e38            1.18e-38         1.40e-45
//   bf16     1       8          7     3.39e38            1.18e-38         9.18e-41
//   fp16     1       5         10     65504              6.10e-5          5.96e-8
//
// float -> half rounds to nearest, ties to even (IEEE 754's default, what GPUs do); values
// beyond the largest finite become infinity; NaN stays NaN; the sign of zero is kept.
// half -> float is exact (every half value is a float).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace scalelab {

enum class HalfFormat { kBF16, kFP16 };

// "bf16" or "fp16".
const char* half_format_name(HalfFormat format);
// Parses "bf16" or "fp16"; ConfigError naming `precision` otherwise.
HalfFormat parse_half_format(const std::string& name);

// Drops the low n bits of v (1 <= n <= 31), rounding to nearest, ties to even: the rounding
// step of every float -> half conversion. The result may carry into the bit above the kept ones.
std::uint32_t shift_round_even(std::uint32_t v, std::uint32_t n);

// Scalar conversions on bit patterns (section 2 and 3 of the lab 03 handout).
std::uint16_t float_to_bf16(float x);
float bf16_to_float(std::uint16_t h);
std::uint16_t float_to_fp16(float x);
float fp16_to_float(std::uint16_t h);

// The same over arrays, for either format.
void float_to_half(std::uint16_t* out, const float* in, std::size_t n, HalfFormat format);  // out, in (n)
void half_to_float(float* out, const std::uint16_t* in, std::size_t n, HalfFormat format);  // out, in (n)
// Rounds x (n) in place to the nearest value of the format, kept in fp32: what a tensor core's
// half output looks like when read back. Applied to layer outputs at layer boundaries.
void round_to_half(float* x, std::size_t n, HalfFormat format);

// The format's range, as floats (for tests, the docs and the memory report).
struct HalfLimits {
  float largest;  // largest finite value
  float smallest_normal;
  float smallest_subnormal;
  int mantissa_bits;  // explicit fraction bits: 7 (bf16) or 10 (fp16)
};
HalfLimits half_limits(HalfFormat format);

}  // namespace scalelab
