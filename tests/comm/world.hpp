// The communicator the comm tests run on: a one-rank LocalCommunicator in test_comm, the MPI
// world (1-4 ranks under mpiexec) in test_comm_mpi. Tests written against it run on both.
#pragma once

#include <string>

#include "comm/communicator.hpp"

namespace scalelab_test {

scalelab::Communicator& test_world();

// "rank 2 of 4 (mpi)": prefix for INFO messages, so a failure says which rank saw it.
inline std::string where(const scalelab::Communicator& c) {
  return "rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size()) + " (" + c.backend() + ")";
}

}  // namespace scalelab_test
