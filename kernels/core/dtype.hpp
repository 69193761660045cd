// The element types of the CUDA backend: float (fp32), __nv_bfloat16 (bf16) and __half (fp16).
// Storage may be half precision; arithmetic inside every kernel is fp32 (see dtype.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include <optional>
#include <type_traits>

#include "comm/datatype.hpp"
#include "precision/half.hpp"

namespace scalelab::cuda {

using bf16 = __nv_bfloat16;
using fp16 = __half;

template <typename T>
struct DType;
template <>
struct DType<float> {
  static constexpr const char* name = "fp32";
  static constexpr cudaDataType_t cuda_type = CUDA_R_32F;
  static constexpr DataType comm_type = DataType::kFloat32;  // the Communicator's name for it
};
template <>
struct DType<bf16> {
  static constexpr const char* name = "bf16";
  static constexpr cudaDataType_t cuda_type = CUDA_R_16BF;
  static constexpr DataType comm_type = DataType::kBFloat16;
};
template <>
struct DType<fp16> {
  static constexpr const char* name = "fp16";
  static constexpr cudaDataType_t cuda_type = CUDA_R_16F;
  static constexpr DataType comm_type = DataType::kFloat16;
};

// The host's 16-bit format of F (precision/half.hpp: the same bits as the device's), none for float.
template <typename F>
constexpr std::optional<HalfFormat> half_format_of() {
  if constexpr (std::is_same_v<F, bf16>) return HalfFormat::kBF16;
  if constexpr (std::is_same_v<F, fp16>) return HalfFormat::kFP16;
  return std::nullopt;
}

}  // namespace scalelab::cuda
