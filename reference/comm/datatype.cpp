// Sizes, names and the host reduction of the Communicator's element types.
#include "comm/datatype.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace scalelab {

std::size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kUInt8: return 1;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
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
  }
  SCALELAB_CHECK(false, "unknown DataType ", static_cast<int>(t));
}

}  // namespace scalelab
