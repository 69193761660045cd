// Sizes, names and the host reduction of the Communicator's element types.
#include "comm/datatype.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.hpp"

namespace scalelab {

std::size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kUInt8: return 1;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kBFloat16:
    case DataType::kFloat16: return 2;
  }
  SCALELAB_CHECK(false, "unknown DataType ", static_cast<int>(t));
}

const char* dtype_name(DataType t) {
  switch (t) {
    case DataType::kUInt8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat32: return "float";
    case DataType::kFloat64: return "double";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat16: return "half";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

namespace {
template <typename T>
void reduce_typed(T* inout, const T* in, std::size_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      for (std::size_t i = 0; i < count; ++i) inout[i] += in[i];
      return;
    case ReduceOp::kMax:
      for (std::size_t i = 0; i < count; ++i) inout[i] = std::max(inout[i], in[i]);
      return;
    case ReduceOp::kMin:
      for (std::size_t i = 0; i < count; ++i) inout[i] = std::min(inout[i], in[i]);
      return;
  }
  SCALELAB_CHECK(false, "unknown ReduceOp ", static_cast<int>(op));
}
// The 16-bit floats, widened to fp32 (exact) and rounded back to nearest, ties to even. The
// communicator keeps its own conversions rather than stage 03's (precision/half.hpp, which lab 03
// writes and which sits above comm/): bf16 by the bit rule, fp16 by the compiler's _Float16.
float widen(std::uint16_t h, DataType t) {
  if (t == DataType::kBFloat16) return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
  _Float16 f;
  std::memcpy(&f, &h, sizeof h);
  return static_cast<float>(f);
}

std::uint16_t narrow(float x, DataType t) {
  if (t == DataType::kBFloat16) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
    return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  const _Float16 f = static_cast<_Float16>(x);
  std::uint16_t h;
  std::memcpy(&h, &f, sizeof h);
  return h;
}

void reduce_half(std::uint16_t* inout, const std::uint16_t* in, std::size_t count, DataType t, ReduceOp op) {
  for (std::size_t i = 0; i < count; ++i) {
    const float a = widen(inout[i], t), b = widen(in[i], t);
    switch (op) {
      case ReduceOp::kSum: inout[i] = narrow(a + b, t); break;
      case ReduceOp::kMax: inout[i] = narrow(std::max(a, b), t); break;
      case ReduceOp::kMin: inout[i] = narrow(std::min(a, b), t); break;
    }
  }
}
}  // namespace

void reduce_host(void* inout, const void* in, std::size_t count, DataType t, ReduceOp op) {
  switch (t) {
    case DataType::kUInt8:
      return reduce_typed(static_cast<std::uint8_t*>(inout), static_cast<const std::uint8_t*>(in), count, op);
    case DataType::kInt32:
      return reduce_typed(static_cast<std::int32_t*>(inout), static_cast<const std::int32_t*>(in), count, op);
    case DataType::kInt64:
      return reduce_typed(static_cast<std::int64_t*>(inout), static_cast<const std::int64_t*>(in), count, op);
    case DataType::kFloat32: return reduce_typed(static_cast<float*>(inout), static_cast<const float*>(in), count, op);
    case DataType::kFloat64:
      return reduce_typed(static_cast<double*>(inout), static_cast<const double*>(in), count, op);
    case DataType::kBFloat16:
    case DataType::kFloat16:
      return reduce_half(static_cast<std::uint16_t*>(inout), static_cast<const std::uint16_t*>(in), count, t, op);
  }
  SCALELAB_CHECK(false, "unknown DataType ", static_cast<int>(t));
}

}  // namespace scalelab
