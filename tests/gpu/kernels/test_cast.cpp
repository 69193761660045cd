// The GPU casts (kernels/precision/cast.hpp) against stage 03's CPU conversions
// (precision/half.hpp), bit for bit: every 16-bit pattern widened, and fp32 patterns chosen
// around every rounding decision (exact values, just below, at and just above each tie, ties
// with an odd and an even kept part), subnormals on both sides, overflow, infinities and NaNs.
#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/core/device.hpp"
#include "kernels/precision/cast.hpp"

namespace {

using namespace scalelab_gpu_test;
namespace cuda = scalelab::cuda;
using scalelab::MemCategory;

// All 65536 patterns of a 16-bit format, in order (index = pattern).
std::vector<std::uint16_t> all_16bit_patterns() {
  std::vector<std::uint16_t> h(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<std::uint16_t>(i);
  return h;
}

// fp32 inputs for the narrowing casts (about 850k patterns).
std::vector<float> narrowing_sweep() {
  std::vector<std::uint32_t> u;
  // A stride through all 2^32 patterns: every exponent, both signs, NaNs with many payloads.
  for (std::uint64_t p = 0; p < (1ull << 32); p += 65537) u.push_back(static_cast<std::uint32_t>(p));
  // bf16 keeps the top 16 bits: for each of them, the pattern exact, just below the tie, at
  // the tie, just above, and the last before the next (0x7f80xxxx: NaNs that round to inf if
  // rounded blindly).
  for (std::uint32_t h = 0; h < 65536; ++h)
    for (std::uint32_t low : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) u.push_back(h << 16 | low);
  // fp16 keeps 10 of the 23 mantissa bits: the same around the 13 dropped bits, for exponents
  // from below fp16's smallest subnormal (2^-24) to past its overflow (65520), both signs. For
  // subnormal results more bits are dropped; the enumerated kept mantissa covers their ties.
  for (std::uint32_t sign : {0u, 1u})
    for (std::uint32_t e = 100; e <= 144; ++e)
      for (std::uint32_t m = 0; m < 1024; ++m)
        for (std::uint32_t low : {0x0000u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu})
          u.push_back(sign << 31 | e << 23 | m << 13 | low);
  std::vector<float> x(u.size());
  for (std::size_t i = 0; i < u.size(); ++i) x[i] = std::bit_cast<float>(u[i]);
  return x;
}

template <typename H>
DeviceBuffer<H> upload_bits(const std::vector<std::uint16_t>& bits) {
  DeviceBuffer<H> d(bits.size(), MemCategory::kWorkspace, nullptr);
  SCALELAB_CUDA_CHECK(cudaMemcpy(d.data(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

TEMPLATE_TEST_CASE("casts are bitwise equal to stage 03's CPU conversions", "[gpu][cast]", bf16, fp16) {
  using H = TestType;
  const std::string name = dtype_name<H>();
  cuda::Stream stream;

  SECTION("fp32 -> " + name + " over a sweep of fp32 patterns") {
    const std::vector<float> x = narrowing_sweep();
    std::vector<std::uint16_t> want(x.size());
    scalelab::float_to_half(want.data(), x.data(), x.size(), half_format<H>());
    DeviceBuffer<float> d_x = upload<float>(x);
    DeviceBuffer<H> d_out(x.size(), MemCategory::kWorkspace, nullptr);
    poison(d_out);
    cuda::cast(d_out.data(), d_x.data(), x.size(), stream.get());
    stream.synchronize();
    check_bitwise16("fp32 -> " + name, download_bits(d_out), want, x);
  }

  SECTION(name + " -> fp32 for every 16-bit pattern") {
    const std::vector<std::uint16_t> h = all_16bit_patterns();
    std::vector<float> want(h.size());
    scalelab::half_to_float(want.data(), h.data(), h.size(), half_format<H>());
    DeviceBuffer<H> d_h = upload_bits<H>(h);
    DeviceBuffer<float> d_out(h.size(), MemCategory::kWorkspace, nullptr);
    poison(d_out);
    cuda::cast(d_out.data(), d_h.data(), h.size(), stream.get());
    stream.synchronize();
    check_bitwise(name + " -> fp32 (index = the 16-bit pattern)", download(d_out), want);
  }

  SECTION(name + " -> " + name + " copies every 16-bit pattern") {
    const std::vector<std::uint16_t> h = all_16bit_patterns();
    DeviceBuffer<H> d_h = upload_bits<H>(h);
    DeviceBuffer<H> d_out(h.size(), MemCategory::kWorkspace, nullptr);
    poison(d_out);
    cuda::cast(d_out.data(), d_h.data(), h.size(), stream.get());
    stream.synchronize();
    std::vector<float> as_float(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) as_float[i] = static_cast<float>(i);  // the pattern, for the message
    check_bitwise16(name + " -> " + name, download_bits(d_out), h, as_float);
  }
}

TEST_CASE("cast fp32 -> fp32 copies every bit", "[gpu][cast]") {
  cuda::Stream stream;
  const std::vector<float> x = narrowing_sweep();
  DeviceBuffer<float> d_x = upload<float>(x);
  DeviceBuffer<float> d_out(x.size(), MemCategory::kWorkspace, nullptr);
  poison(d_out);
  cuda::cast(d_out.data(), d_x.data(), x.size(), stream.get());
  stream.synchronize();
  check_bitwise("fp32 -> fp32", download(d_out), x);
}

}  // namespace
