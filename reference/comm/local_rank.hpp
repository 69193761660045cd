// Which of a host's ranks this one is. A job of several processes per node gives each its own
// GPU by this number (kernels/core/device.hpp's select_local_gpu): the k-th rank on a host takes
// GPU k mod (GPUs of that host). It must be the WORLD's local rank, taken once at startup: a
// sub-group (a tensor-parallel or data-parallel group) numbers its members on a host from 0 too,
// and two groups would then put their first members on the same GPU.
#pragma once

#include <string>

#include "comm/communicator.hpp"

namespace scalelab {

// This machine's host name ("?" when it cannot be read).
std::string this_host_name();

// Collective over `comm`: the number of ranks of comm before this one whose host name is this
// rank's (0 for the first rank on every host); the same answer however the ranks are spread.
int local_rank_on_host(Communicator& comm);

}  // namespace scalelab
