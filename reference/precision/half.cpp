// Stage 03: fp32 <-> bf16 and fp32 <-> fp16 by hand, round to nearest even, on bit patterns.
// An fp32 value is (-1)^s * 1.m * 2^(e-127) with s 1 bit, e 8 bits, m 23 bits (e = 0: subnormal
// 0.m * 2^-126; e = 255: infinity if m = 0, else NaN). bf16 is the top half of that pattern;
// fp16 has 5 exponent bits (bias 15) and 10 mantissa bits.
#include "precision/half.hpp"

#include <algorithm>
#include <bit>

#include "core/error.hpp"

namespace scalelab {

namespace {
std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }
float float_of(std::uint32_t u) { return std::bit_cast<float>(u); }
// c ? a : b with a mask instead of a branch (the compiler keeps it branch-free). Unused in the
// lab 03 skeleton, whose conversions are stubs.
[[maybe_unused]] std::uint32_t select(bool c, std::uint32_t a, std::uint32_t b) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(c);
  return (a & mask) | (b & ~mask);
}
}  // namespace

const char* half_format_name(HalfFormat format) { return format == HalfFormat::kBF16 ? "bf16" : "fp16"; }

HalfFormat parse_half_format(const std::string& name) {
  if (name == "bf16") return HalfFormat::kBF16;
  if (name == "fp16") return HalfFormat::kFP16;
  throw ConfigError("precision: '" + name + "' is not a 16-bit format; use bf16 or fp16");
}

std::uint32_t shift_round_even(std::uint32_t v, std::uint32_t n) {
  // LAB 03 BEGIN shift_round_even: section 2
  // Add just under half of the dropped unit, plus one when the kept part is odd: the sum carries
  // into the kept part exactly when the dropped bits are above half, or at half with an odd kept
  // part, so an exact tie goes to the even neighbour.
  const std::uint32_t odd = (v >> n) & 1u;
  return (v + ((1u << (n - 1)) - 1u) + odd) >> n;
  // LAB 03 END
}

std::uint16_t float_to_bf16(float x) {
  const std::uint32_t u = bits_of(x);
  // LAB 03 BEGIN float_to_bf16: section 2
  // NaN: rounding could clear every mantissa bit that is left and turn it into infinity, so keep
  // the sign and the top bits and set the quiet bit.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  // Drop the low 16 bits. A carry out of the mantissa bumps the exponent, which is the correct
  // rounding up to the next binade, or to infinity past the largest finite value.
  return static_cast<std::uint16_t>(shift_round_even(u, 16));
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
  // Both candidates below are computed and one is selected, without a branch: gradients mix
  // normal and subnormal values, and a mispredicted branch per element would cost more than both.
  // |x| >= 2^-14, a normal fp16: round the 23-bit mantissa to 10 bits (a carry rolls into the
  // exponent), then re-bias the exponent from 127 to 15.
  const std::uint32_t normal = shift_round_even(a, 13) - (112u << 10);
  // |x| < 2^-14, a subnormal fp16 k * 2^-24. With |x| = (2^23 + m) * 2^(e-150),
  // k = round((2^23 + m) / 2^(126-e)), ties to even; k = 1024 is the pattern of the smallest
  // normal, 0x0400, so rounding up into it needs no special case. Below 2^-25 (e < 102), and at
  // 2^-25 itself (a tie with 0), k = 0: the value flushes to zero. The exponent is clamped to
  // [101, 113] so that the shift is defined for every input; a shift of 25 gives k = 0.
  const std::uint32_t e = a >> 23;
  const std::uint32_t shift = 126u - select(e > 113u, 113u, select(e < 101u, 101u, e));
  const std::uint32_t subnormal = shift_round_even((a & 0x007fffffu) | 0x00800000u, shift);
  // 65520 = 65504 + half an ulp is the tie between the largest finite (mantissa 0x3ff, odd) and
  // 2^16; ties go to even, so 65520 and above (infinity included) become infinity.
  const std::uint32_t r = select(a >= 0x477ff000u, 0x7c00u, select(a >= 0x38800000u, normal, subnormal));
  return static_cast<std::uint16_t>(sign | r);
  // LAB 03 END
}

float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x03ffu;
  // LAB 03 BEGIN fp16_to_float: section 3
  const std::uint32_t special = sign | 0x7f800000u | (m << 13);        // infinity, or NaN (m != 0 stays NaN)
  const std::uint32_t normal = sign | ((e + 112u) << 23) | (m << 13);  // re-bias the exponent 15 -> 127
  // Zero or subnormal: m * 2^-24, a normal fp32 value (or 0) that the product gives exactly (m
  // has at most 10 bits, and scaling by a power of two only changes the exponent).
  const std::uint32_t small = sign | bits_of(static_cast<float>(m) * 0x1p-24f);
  return float_of(select(e == 0x1fu, special, select(e != 0, normal, small)));
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
  // Through a small half buffer, chunk by chunk: the two array loops above are the fast path.
  constexpr std::size_t kChunk = 512;
  std::uint16_t h[kChunk];
  for (std::size_t offset = 0; offset < n; offset += kChunk) {
    const std::size_t count = std::min(kChunk, n - offset);
    float_to_half(h, x + offset, count, format);
    half_to_float(x + offset, h, count, format);
  }
}

HalfLimits half_limits(HalfFormat format) {
  // Written from the formats' definitions (not through the conversions above, which the tests
  // check against these).
  if (format == HalfFormat::kBF16) return {float_of(0x7f7f0000u), float_of(0x00800000u), float_of(0x00010000u), 7};
  return {65504.0f, 6.103515625e-05f /* 2^-14 */, 5.9604644775390625e-08f /* 2^-24 */, 10};
}

}  // namespace scalelab
