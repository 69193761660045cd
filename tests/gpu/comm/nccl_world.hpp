// The communicators test_nccl runs on: test_world() (tests/comm/world.hpp) is the host
// communicator that bootstraps NCCL (a LocalCommunicator, or the MPI world under mpiexec), and
// nccl_world() the NCCL communicator made from it once in main(), with argument checks on.
#pragma once

#include "kernels/comm/nccl_communicator.hpp"
#include "world.hpp"

namespace scalelab_test {

scalelab::cuda::NcclCommunicator& nccl_world();
// The options nccl_world() is made with: a short timeout (a broken test ends, never hangs) and
// the cross-rank argument check on.
inline scalelab::cuda::NcclOptions nccl_test_options() {
  scalelab::cuda::NcclOptions options;
  options.timeout_seconds = 60;
  options.verify_arguments = true;
  return options;
}

}  // namespace scalelab_test
