// Stage 03: fp32 <-> bf16 and fp32 <-> fp16 by hand, round to nearest even, on bit patterns.
// An fp32 value is (-1)^s * 1.m * 2^(e-127) with s 1 bit, e 8 bits, m 23 bits (e = 0: subnormal
// 0.m * 2^-126; e = 255: infinity if m = 0, else NaN). bf16 is the top half of that pattern;
// fp16 has 5 exponent bits (bias 15) and 10 mantissa bits.
#include "precision/half.hpp"

#include <bit>

#include "core/error.hpp"

namespace scalelab {

namespace {
std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }
float float_of(std::uint32_t u) { return std::bit_cast<float>(u); }
}  // namespace

const char* half_format_name(HalfFormat format) { return format == HalfFormat::kBF16 ? "bf16" : "fp16"; }

HalfFormat parse_half_format(const std::string& name) {
  if (name == "bf16") return HalfFormat::kBF16;
  if (name == "fp16") return HalfFormat::kFP16;
  throw ConfigError("precision: '" + name + "' is not a 16-bit format; use bf16 or fp16");
}

std::uint16_t float_to_bf16(float x) {
  const std::uint32_t u = bits_of(x);
  // LAB 03 BEGIN float_to_bf16: section 2
  // NaN: truncating could clear every mantissa bit that is left and turn it into infinity, so
  // keep the sign and the top bits and set the quiet bit.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  // Round the low 16 bits away: add just under half an ulp, plus one when the kept part is odd,
  // so an exact tie goes to the even neighbour. A carry out of the mantissa bumps the exponent,
  // which is the correct rounding up to the next binade, or to infinity past the largest finite.
  const std::uint32_t odd = (u >> 16) & 1u;
  return static_cast<std::uint16_t>((u + 0x7fffu + odd) >> 16);
  // LAB 03 END
}

float bf16_to_float(std::uint16_t h) {
  // LAB 03 BEGIN bf16_to_float: section 2
  return float_of(static_cast<std::uint32_t>(h) << 16);
  // LAB 03 END
}

std::uint16_t float_to_fp16(float x) {
  const std::uint32_t u = bits_of(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;  // |x|
  // LAB 03 BEGIN float_to_fp16: section 3
  if (a > 0x7f800000u)  // NaN: quiet, with the top of the payload
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x03ffu));
  // 65520 = 65504 + half an ulp is the tie between the largest finite (mantissa 0x3ff, odd) and
  // 2^16; ties go to even, so 65520 and above (infinity included) become infinity.
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // |x| >= 2^-14: a normal fp16
    // Re-bias the exponent from 127 to 15 and round the 23-bit mantissa to 10 bits, the same
    // add-and-shift as bf16 (a carry rolls into the exponent).
    const std::uint32_t odd = (a >> 13) & 1u;
    return static_cast<std::uint16_t>(sign | (((a + 0x0fffu + odd) >> 13) - (112u << 10)));
  }
  // |x| < 2^-14: a subnormal fp16, k * 2^-24 with k in [0, 1023] (1024 rounds up to the
  // smallest normal, whose pattern 0x0400 is exactly k = 1024). 2^-25, half of the smallest
  // subnormal, is a tie with zero and goes to zero; anything at or below it flushes.
  if (a <= 0x33000000u) return sign;
  // |x| = 1.m * 2^(e-127) = (2^23 + m) * 2^(e-150) = k * 2^-24 with k = (2^23 + m) >> (126 - e).
  const std::uint32_t e = a >> 23;
  const std::uint32_t mant = (a & 0x007fffffu) | 0x00800000u;
  const std::uint32_t shift = 126u - e;  // 14..24 here
  std::uint32_t k = mant >> shift;
  const std::uint32_t rest = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (k & 1u))) ++k;
  return static_cast<std::uint16_t>(sign | k);
  // LAB 03 END
}

float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x03ffu;
  // LAB 03 BEGIN fp16_to_float: section 3
  if (e == 0x1fu) return float_of(sign | 0x7f800000u | (m << 13));  // infinity, or NaN (m != 0 stays NaN)
  if (e != 0) return float_of(sign | ((e + 112u) << 23) | (m << 13));  // normal: re-bias 15 -> 127
  if (m == 0) return float_of(sign);                                    // +-0
  // Subnormal m * 2^-24: every such value is a normal float. Shift the leading 1 of m up to the
  // implicit-bit position (bit 10), lowering the exponent by one per shift.
  std::uint32_t mm = m, exponent = 113;  // 2^(113-127) = 2^-14, the scale of bit 10
  while ((mm & 0x0400u) == 0) {
    mm <<= 1;
    --exponent;
  }
  return float_of(sign | (exponent << 23) | ((mm & 0x03ffu) << 13));
  // LAB 03 END
}

void float_to_half(std::uint16_t* out, const float* in, std::size_t n, HalfFormat format) {
  if (format == HalfFormat::kBF16) {
    for (std::size_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = float_to_fp16(in[i]);
  }
}

void half_to_float(float* out, const std::uint16_t* in, std::size_t n, HalfFormat format) {
  if (format == HalfFormat::kBF16) {
    for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = fp16_to_float(in[i]);
  }
}

void round_to_half(float* x, std::size_t n, HalfFormat format) {
  if (format == HalfFormat::kBF16) {
    for (std::size_t i = 0; i < n; ++i) x[i] = bf16_to_float(float_to_bf16(x[i]));
  } else {
    for (std::size_t i = 0; i < n; ++i) x[i] = fp16_to_float(float_to_fp16(x[i]));
  }
}

HalfLimits half_limits(HalfFormat format) {
  // Written from the formats' definitions (not through the conversions above, which the tests
  // check against these).
  if (format == HalfFormat::kBF16) return {float_of(0x7f7f0000u), float_of(0x00800000u), float_of(0x00010000u), 7};
  return {65504.0f, 6.103515625e-05f /* 2^-14 */, 5.9604644775390625e-08f /* 2^-24 */, 10};
}

}  // namespace scalelab
