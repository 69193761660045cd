// Every rank of a job must be started with the same options (stages 04-07). A job whose ranks
// disagree (an MPMD launch with different flags, a stale options file on one node) would
// otherwise build different grids or strategies and wait forever for collectives that never
// match, or, worse, train silently on different settings. This check compares every option at
// the start, before any grid or model exists, and gives one message on every rank.
#pragma once

#include "comm/communicator.hpp"
#include "train/train_options.hpp"

namespace scalelab {

// Collective over world. Throws the same ConfigError on every rank when any rank's options
// differ from rank 0's, naming the first such rank and the options that differ, e.g.
//   options: rank 1 was started with different options than rank 0: parallel.tp is 1 there and
//   2 on rank 0; start every rank with the same options (one command line for mpirun -np N)
void check_same_options(Communicator& world, const TrainOptions& options);

}  // namespace scalelab
