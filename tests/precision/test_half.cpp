// Stage 03: the hand-written fp32 <-> bf16/fp16 conversions, bit for bit.
// Two independent checks: a table of known values, each with the reason it is what it is (ties
// to even in both directions, the largest finite value, overflow to infinity, subnormals, NaN,
// -0), and an oracle written here from the formats' definitions alone (decode every 16-bit
// pattern with ldexp, pick the nearest, ties to the even pattern), run on every tie point
// between neighbouring half values, the floats on either side of it, and random floats.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "precision/half.hpp"

using namespace scalelab;

namespace {

std::string hex(std::uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", digits, v);
  return buf;
}
std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }
float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

// The format from its definition: exponent bits, mantissa bits.
struct Format {
  HalfFormat id;
  int exp_bits, man_bits;
  std::uint16_t (*to_half)(float);
  float (*to_float)(std::uint16_t);
  const char* name;
};
const Format kBF16{HalfFormat::kBF16, 8, 7, float_to_bf16, bf16_to_float, "bf16"};
const Format kFP16{HalfFormat::kFP16, 5, 10, float_to_fp16, fp16_to_float, "fp16"};

// Value of a 16-bit pattern in double, straight from sign/exponent/mantissa (inf as inf, NaN as NaN).
double decode(const Format& f, std::uint16_t h) {
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const int e = (h >> f.man_bits) & ((1 << f.exp_bits) - 1);
  const int m = h & ((1 << f.man_bits) - 1);
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == (1 << f.exp_bits) - 1) return m ? std::nan("") : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, 1 - bias - f.man_bits);
  return sign * std::ldexp((1 << f.man_bits) + m, e - bias - f.man_bits);
}

// Round-to-nearest-even by search: the non-negative finite patterns in increasing order, with
// infinity standing in for 2^(emax+1) (what IEEE rounding compares against for overflow).
struct Oracle {
  const Format& f;
  std::vector<std::uint16_t> patterns;
  std::vector<double> values;
  explicit Oracle(const Format& fmt) : f(fmt) {
    const std::uint16_t inf = static_cast<std::uint16_t>(((1 << f.exp_bits) - 1) << f.man_bits);
    for (std::uint32_t h = 0; h < inf; ++h) {
      patterns.push_back(static_cast<std::uint16_t>(h));
      values.push_back(decode(f, static_cast<std::uint16_t>(h)));
    }
    patterns.push_back(inf);
    values.push_back(std::ldexp(1.0, 1 << (f.exp_bits - 1)));  // 2^(emax+1)
  }
  std::uint16_t round(float x) const {
    if (std::isnan(x)) return 0xffff;  // any NaN; checked separately
    const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= values.back()) return static_cast<std::uint16_t>(sign | patterns.back());
    const std::size_t hi = static_cast<std::size_t>(std::upper_bound(values.begin(), values.end(), a) - values.begin());
    const std::size_t lo = hi - 1;  // values[lo] <= a < values[hi]
    const double dlo = a - values[lo], dhi = values[hi] - a;
    const std::size_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((patterns[lo] & 1) == 0 ? lo : hi);
    return static_cast<std::uint16_t>(sign | patterns[pick]);
  }
};

bool is_half_nan(const Format& f, std::uint16_t h) { return std::isnan(decode(f, h)); }

struct Known {
  std::uint32_t in;   // fp32 bit pattern
  std::uint16_t out;  // expected half pattern
  const char* why;
};

void check_table(const Format& f, const std::vector<Known>& table) {
  for (const Known& k : table) {
    const std::uint16_t got = f.to_half(from_bits(k.in));
    INFO("float_to_" << f.name << "(" << hex(k.in, 8) << " = " << from_bits(k.in) << ") = " << hex(got, 4)
                     << ", expected " << hex(k.out, 4) << ": " << k.why);
    if (is_half_nan(f, k.out)) {
      CHECK(is_half_nan(f, got));
      CHECK((got & 0x8000) == (k.out & 0x8000));
    } else {
      CHECK(got == k.out);
    }
  }
}

void check_widen_table(const Format& f, const std::vector<std::pair<std::uint16_t, std::uint32_t>>& table) {
  for (const auto& [h, want] : table) {
    const float got = f.to_float(h);
    INFO(f.name << "_to_float(" << hex(h, 4) << ") = " << hex(bits(got), 8) << " (" << got << "), expected "
                << hex(want, 8) << " (" << from_bits(want) << ")");
    if (std::isnan(from_bits(want)))
      CHECK(std::isnan(got));
    else
      CHECK(bits(got) == want);
  }
}

// Every 16-bit pattern widens to its exact value; every non-NaN pattern survives a round trip.
void check_all_patterns(const Format& f) {
  int bad_widen = 0, bad_trip = 0;
  std::uint32_t first_widen = 0, first_trip = 0;
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto p = static_cast<std::uint16_t>(h);
    const double want = decode(f, p);
    const float got = f.to_float(p);
    const bool ok = std::isnan(want) ? std::isnan(got)
                                     : (static_cast<double>(got) == want && std::signbit(got) == std::signbit(want));
    if (!ok && bad_widen++ == 0) first_widen = h;
    if (!std::isnan(want) && f.to_half(got) != p && bad_trip++ == 0) first_trip = h;
  }
  INFO(f.name << ": " << bad_widen << " of 65536 patterns widen to a wrong value (first " << hex(first_widen, 4)
              << "); " << bad_trip << " do not survive float -> half (first " << hex(first_trip, 4) << ")");
  CHECK(bad_widen == 0);
  CHECK(bad_trip == 0);
}

// Against the oracle: each midpoint between neighbouring half values (an exact tie, representable
// in fp32), the floats just below and above it, and random floats over the whole range.
void check_against_oracle(const Format& f) {
  const Oracle oracle(f);
  std::vector<float> inputs;
  for (std::size_t i = 0; i + 1 < oracle.values.size(); ++i) {
    const float mid = static_cast<float>((oracle.values[i] + oracle.values[i + 1]) / 2);
    REQUIRE(static_cast<double>(mid) == (oracle.values[i] + oracle.values[i + 1]) / 2);  // an exact tie
    inputs.insert(inputs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY),
                                 static_cast<float>(oracle.values[i])});
  }
  Rng rng(7);
  for (int i = 0; i < 200000; ++i) inputs.push_back(from_bits(static_cast<std::uint32_t>(rng.next_u64())));
  std::size_t bad = 0;
  float first = 0;
  std::uint16_t got_first = 0, want_first = 0;
  for (float x : inputs)
    for (float s : {x, -x}) {
      if (std::isnan(s)) continue;
      const std::uint16_t got = f.to_half(s), want = oracle.round(s);
      if (got != want && bad++ == 0) first = s, got_first = got, want_first = want;
    }
  INFO(f.name << ": " << bad << " of " << 2 * inputs.size() << " conversions differ from round-to-nearest-even; first: "
              << "float_to_" << f.name << "(" << hex(bits(first), 8) << " = " << first << ") = " << hex(got_first, 4)
              << ", expected " << hex(want_first, 4));
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("bf16 conversions are bit-exact round-to-nearest-even", "[graded][half_bf16]") {
  // The rounding step alone: drop n bits of v, to nearest, ties to even.
  struct Shift {
    std::uint32_t v, n, want;
    const char* why;
  };
  for (const Shift& c :
       {Shift{0x27, 4, 2, "2.4375 rounds down"}, Shift{0x29, 4, 3, "2.5625 rounds up"},
        Shift{0x28, 4, 2, "2.5 is a tie: to even, down"}, Shift{0x18, 4, 2, "1.5 is a tie: to even, up"},
        Shift{0x80, 8, 0, "0.5 is a tie: to even, 0"}, Shift{0xff, 8, 1, "0.996 rounds up"},
        Shift{5, 1, 2, "2.5 with one dropped bit"}, Shift{7, 1, 4, "3.5 with one dropped bit"},
        Shift{0xffffff, 24, 1, "just under 1 with 24 dropped bits"},
        Shift{0x7f7fffff, 16, 0x7f80, "carries into the bit above the kept ones"}}) {
    const std::uint32_t got = shift_round_even(c.v, c.n);
    INFO("shift_round_even(" << hex(c.v, 8) << ", " << c.n << ") = " << got << ", expected " << c.want << ": "
                             << c.why);
    CHECK(got == c.want);
  }
  check_table(kBF16, {
                         {0x3f800000, 0x3f80, "1.0 is exact"},
                         {0xc0200000, 0xc020, "-2.5 is exact"},
                         {0x3f808000, 0x3f80, "1 + 2^-8 is a tie between 0x3f80 (even) and 0x3f81: ties to even, down"},
                         {0x3f818000, 0x3f82, "1 + 3*2^-8 is a tie between 0x3f81 and 0x3f82 (even): ties to even, up"},
                         {0x3f808001, 0x3f81, "just above the tie rounds up"},
                         {0x3f807fff, 0x3f80, "just below the tie rounds down"},
                         {0x3fbfffff, 0x3fc0, "rounding up carries through the mantissa bits"},
                         {0x3f7fffff, 0x3f80, "the largest float below 1 rounds up to 1.0 (carry into the exponent)"},
                         {0x7f7f0000, 0x7f7f, "the largest finite bf16, 3.3895e38, is exact"},
                         {0x7f7f7fff, 0x7f7f, "just below the tie with 2^128 stays finite"},
                         {0x7f7f8000, 0x7f80, "the tie between the largest finite (odd) and 2^128 goes to infinity"},
                         {0x7f7fffff, 0x7f80, "FLT_MAX overflows to infinity"},
                         {0x7f800000, 0x7f80, "+infinity"},
                         {0xff800000, 0xff80, "-infinity"},
                         {0x80000000, 0x8000, "-0 keeps its sign"},
                         {0x00000000, 0x0000, "+0"},
                         {0x00010000, 0x0001, "the smallest bf16 subnormal, 2^-133, is exact"},
                         {0x00008000, 0x0000, "half the smallest subnormal is a tie with 0 (even): flushes to zero"},
                         {0x00018000, 0x0002, "1.5 subnormal ulps is a tie between 0x0001 and 0x0002 (even)"},
                         {0x00008001, 0x0001, "just above half the smallest subnormal rounds up to it"},
                         {0x007fffff, 0x0080, "the largest float subnormal rounds up to the smallest normal bf16"},
                         {0x7fc00000, 0x7fc0, "a quiet NaN stays NaN"},
                         {0x7f800001, 0x7fc0,
                          "a NaN whose payload is only in the low 16 bits must stay NaN, not become infinity"},
                         {0xffc00001, 0xffc0, "a negative NaN stays a negative NaN"},
                     });
  check_widen_table(kBF16, {{0x3f80, 0x3f800000},
                            {0x0001, 0x00010000},
                            {0x7f7f, 0x7f7f0000},
                            {0x7f80, 0x7f800000},
                            {0xff80, 0xff800000},
                            {0x8000, 0x80000000},
                            {0x7fc1, 0x7fc10000}});
  check_all_patterns(kBF16);
  check_against_oracle(kBF16);
}

TEST_CASE("fp16 conversions are bit-exact round-to-nearest-even", "[graded][half_fp16]") {
  check_table(
      kFP16,
      {
          {0x3f800000, 0x3c00, "1.0 is exact"},
          {0xc0200000, 0xc100, "-2.5 is exact"},
          {0x3f801000, 0x3c00, "1 + 2^-11 is a tie between 0x3c00 (even) and 0x3c01: ties to even, down"},
          {0x3f803000, 0x3c02, "1 + 3*2^-11 is a tie between 0x3c01 and 0x3c02 (even): ties to even, up"},
          {0x3f801001, 0x3c01, "just above the tie rounds up"},
          {0x3f800fff, 0x3c00, "just below the tie rounds down"},
          {0x3f7fffff, 0x3c00, "the largest float below 1 rounds up to 1.0 (carry into the exponent)"},
          {0x477fe000, 0x7bff, "65504, the largest finite fp16, is exact"},
          {0x477fefff, 0x7bff, "just below 65520 rounds down to 65504"},
          {0x477ff000, 0x7c00, "65520 is the tie between 65504 (odd) and 65536: ties to even, infinity"},
          {0x47c35000, 0x7c00, "100000 overflows to infinity"},
          {0xc7c35000, 0xfc00, "-100000 overflows to -infinity"},
          {0x7f800000, 0x7c00, "+infinity"},
          {0x80000000, 0x8000, "-0 keeps its sign"},
          {0x38800000, 0x0400, "2^-14, the smallest normal fp16"},
          {0x387fc000, 0x03ff, "1023 * 2^-24, the largest subnormal fp16"},
          {0x387fe000, 0x0400, "1023.5 * 2^-24 is a tie between 0x03ff (odd) and 0x0400: up to the smallest normal"},
          {0x33800000, 0x0001, "2^-24, the smallest subnormal fp16"},
          {0x33000000, 0x0000, "2^-25 is a tie between 0 (even) and 2^-24: flushes to zero"},
          {0x33000001, 0x0001, "just above 2^-25 rounds up to the smallest subnormal"},
          {0x33c00000, 0x0002, "1.5 * 2^-24 is a tie between 0x0001 and 0x0002 (even)"},
          {0x35000000, 0x0008, "2^-21 is the subnormal 8 * 2^-24"},
          {0x32800000, 0x0000, "2^-26 flushes to zero"},
          {0xb3c00000, 0x8002, "-1.5 * 2^-24 rounds to even with its sign"},
          {0x00000001, 0x0000, "the smallest float subnormal flushes to zero"},
          {0x7fc00000, 0x7e00, "a quiet NaN stays NaN"},
          {0x7f800001, 0x7e00, "a NaN whose payload is only in the low bits must stay NaN, not become infinity"},
          {0xffc00000, 0xfe00, "a negative NaN stays a negative NaN"},
      });
  check_widen_table(kFP16, {{0x3c00, 0x3f800000},
                            {0x7bff, 0x477fe000},
                            {0x0400, 0x38800000},
                            {0x03ff, 0x387fc000},
                            {0x0001, 0x33800000},
                            {0x8001, 0xb3800000},
                            {0x7c00, 0x7f800000},
                            {0xfc00, 0xff800000},
                            {0x8000, 0x80000000},
                            {0x7e00, 0x7fc00000},
                            {0x7c01, 0x7fc00000}});
  check_all_patterns(kFP16);
  check_against_oracle(kFP16);
}

TEST_CASE("array conversions and in-place rounding agree with the scalar ones", "[half_arrays]") {
  const std::vector<float> x = {1.0f, 1.00048828125f, 65520.0f, 3e-8f, -0.0f, 1e-45f, 3.14159f};
  for (const Format* f : {&kBF16, &kFP16}) {
    std::vector<std::uint16_t> h(x.size());
    std::vector<float> back(x.size()), rounded = x;
    float_to_half(h.data(), x.data(), x.size(), f->id);
    half_to_float(back.data(), h.data(), h.size(), f->id);
    round_to_half(rounded.data(), rounded.size(), f->id);
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO(f->name << " element " << i << " (" << x[i] << ")");
      CHECK(h[i] == f->to_half(x[i]));
      CHECK(bits(back[i]) == bits(f->to_float(h[i])));
      CHECK(bits(rounded[i]) == bits(back[i]));
    }
  }
}

TEST_CASE("half_limits match the formats", "[half_limits]") {
  for (const Format* f : {&kBF16, &kFP16}) {
    const HalfLimits lim = half_limits(f->id);
    const int bias = (1 << (f->exp_bits - 1)) - 1;
    INFO(f->name);
    CHECK(static_cast<double>(lim.smallest_normal) == std::ldexp(1.0, 1 - bias));
    CHECK(static_cast<double>(lim.smallest_subnormal) == std::ldexp(1.0, 1 - bias - f->man_bits));
    CHECK(static_cast<double>(lim.largest) == std::ldexp(2.0 - std::ldexp(1.0, -f->man_bits), bias));
    CHECK(lim.mantissa_bits == f->man_bits);
  }
}

TEST_CASE("half format names are parsed or rejected clearly", "[half_format]") {
  CHECK(parse_half_format("bf16") == HalfFormat::kBF16);
  CHECK(parse_half_format("fp16") == HalfFormat::kFP16);
  CHECK(std::string(half_format_name(HalfFormat::kFP16)) == "fp16");
  CHECK_THROWS_WITH(parse_half_format("fp8"),
                    Catch::Contains("precision: 'fp8' is not a 16-bit format") && Catch::Contains("use bf16 or fp16"));
}
