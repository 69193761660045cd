// The error messages behind SCALELAB_NCCL_CHECK, and the type and operator tables.
#include "kernels/comm/nccl_check.hpp"

#include <string>

#include "core/error.hpp"

namespace scalelab::cuda {

void throw_nccl_error(ncclResult_t result, const char* call, const char* file, int line, int rank, ncclComm_t comm) {
  std::string reason = ncclGetErrorString(result);
  // ncclGetLastError says what went wrong in words ("NET/Socket : Connect to ... failed"); empty
  // when NCCL has nothing to add.
  const char* last = ncclGetLastError(comm);
  if (last && *last) reason += std::string(": ") + last;
  throw Error(detail::concat(file, ":", line, ": NCCL error ", static_cast<int>(result), " (", reason, ") in ", call,
                             " on rank ", rank, ". For more, rerun with NCCL_DEBUG=INFO (docs/nccl.md)"));
}

ncclDataType_t nccl_datatype(DataType t) {
  switch (t) {
    case DataType::kUInt8: return ncclUint8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kBFloat16: return ncclBfloat16;  // NCCL adds 16-bit floats in fp32 and rounds each hop
    case DataType::kFloat16: return ncclFloat16;
  }
  throw Error(detail::concat("unknown DataType ", static_cast<int>(t)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  throw Error(detail::concat("unknown ReduceOp ", static_cast<int>(op)));
}

}  // namespace scalelab::cuda
