// Checked NCCL calls and the mapping of our element types and reductions onto NCCL's (stage 04
// on the GPU). Every NCCL call goes through SCALELAB_NCCL_CHECK, so a failure throws
// scalelab::Error naming the call, the place, the rank and NCCL's own explanation instead of
// surfacing later as a hang or a wrong number.
#pragma once

#include <nccl.h>

#include "comm/datatype.hpp"

// ncclCommSplit arrived in 2.18; older headers would fail below with a less helpful message.
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "scalelab's NCCL backend needs NCCL 2.18 or newer (ncclCommSplit); point SCALELAB_NCCL_ROOT at one"
#endif

namespace scalelab::cuda {

// Throws scalelab::Error: "<file>:<line>: NCCL error <name> (<detail>) in <call> on rank <rank>".
// comm may be null (before a communicator exists); with one, NCCL's last message is added.
[[noreturn]] void throw_nccl_error(ncclResult_t result, const char* call, const char* file, int line, int rank,
                                   ncclComm_t comm);

ncclDataType_t nccl_datatype(DataType t);
ncclRedOp_t nccl_op(ReduceOp op);

}  // namespace scalelab::cuda

// SCALELAB_NCCL_CHECK(ncclAllReduce(...), rank, comm) throws on anything but ncclSuccess.
#define SCALELAB_NCCL_CHECK(call, rank, comm)                                                               \
  do {                                                                                                      \
    const ncclResult_t scalelab_nccl_result_ = (call);                                                      \
    if (scalelab_nccl_result_ != ncclSuccess)                                                               \
      ::scalelab::cuda::throw_nccl_error(scalelab_nccl_result_, #call, __FILE__, __LINE__, (rank), (comm)); \
  } while (0)
