// The element types of the CUDA backend: float (fp32), __nv_bfloat16 (bf16) and __half (fp16).
// Storage may be half precision; arithmetic inside every kernel is fp32 (see dtype.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include "comm/datatype.hpp"

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

}  // namespace scalelab::cuda
