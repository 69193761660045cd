// Elementwise conversions through the CUDA intrinsics __float2bfloat16_rn / __float2half_rn
// (round to nearest even; they do not flush subnormals) and their exact inverses, with NaN
// handled by hand as the CPU handles it (see convert_from_float below).
#include <type_traits>

#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/precision/cast.hpp"

namespace scalelab::cuda {

namespace {

// fp32 -> F. For NaN the hardware returns one canonical NaN (0x7fff); reference/precision's
// conversions keep the sign and the top of the payload and set the quiet bit. Both are valid
// NaNs, but the cast promises the CPU's bits, so that stage 03's GPU path can be compared with
// the lab's conversions bitwise over every input, NaNs included.
template <typename F>
__device__ __forceinline__ F convert_from_float(float x);
template <>
__device__ __forceinline__ float convert_from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 convert_from_float<bf16>(float x) {
  const unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __ushort_as_bfloat16(static_cast<unsigned short>((u >> 16) | 0x0040u));
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ fp16 convert_from_float<fp16>(float x) {
  const unsigned u = __float_as_uint(x), a = u & 0x7fffffffu;
  if (a > 0x7f800000u)
    return __ushort_as_half(static_cast<unsigned short>(((u >> 16) & 0x8000u) | 0x7e00u | ((a >> 13) & 0x03ffu)));
  return __float2half_rn(x);
}

// F -> fp32, exact. A NaN keeps its payload in the top of the fp32 mantissa, as on the CPU
// (written out rather than left to the hardware, which may set the quiet bit on the way).
__device__ __forceinline__ float convert_to_float(float x) { return x; }
__device__ __forceinline__ float convert_to_float(bf16 x) {
  return __uint_as_float(static_cast<unsigned>(__bfloat16_as_ushort(x)) << 16);  // bf16 is fp32's top half
}
__device__ __forceinline__ float convert_to_float(fp16 x) {
  const unsigned h = __half_as_ushort(x);
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0)
    return __uint_as_float(((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x03ffu) << 13));
  return __half2float(x);
}

template <typename To, typename From>
__global__ void cast_kernel(To* out, const From* in, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<To, From>)
      out[i] = in[i];  // a copy keeps every bit, signalling NaNs too
    else
      out[i] = convert_from_float<To>(convert_to_float(in[i]));  // exact widening, then one rounding
  }
}

}  // namespace

template <typename To, typename From>
void cast(To* out, const From* in, std::size_t N, cudaStream_t stream) {
  if (N == 0) return;
  cast_kernel<To, From><<<blocks_for(N), kThreads, 0, stream>>>(out, in, N);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template void cast<bf16, float>(bf16*, const float*, std::size_t, cudaStream_t);
template void cast<fp16, float>(fp16*, const float*, std::size_t, cudaStream_t);
template void cast<float, bf16>(float*, const bf16*, std::size_t, cudaStream_t);
template void cast<float, fp16>(float*, const fp16*, std::size_t, cudaStream_t);
template void cast<float, float>(float*, const float*, std::size_t, cudaStream_t);
template void cast<bf16, bf16>(bf16*, const bf16*, std::size_t, cudaStream_t);
template void cast<fp16, fp16>(fp16*, const fp16*, std::size_t, cudaStream_t);

}  // namespace scalelab::cuda
