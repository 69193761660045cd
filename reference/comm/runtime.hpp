// Starting and ending a (possibly multi-rank) job (stage 04). A program makes one CommRuntime,
// takes world() from it, and runs its work inside run(), which turns a failure on any rank into
// the end of the whole job:
//
//   CommRuntime runtime(Backend::kAuto, CommOptions{});
//   return runtime.run([&](Communicator& world) { ...; return 0; });
//
// Backends: local (one rank, no MPI), mpi (compiled when MPI is found; launch with mpirun),
// auto (mpi when compiled in, else local). NCCL communicators are made later from an MPI world
// (the ncclUniqueId travels by world.broadcast), so they need no runtime of their own.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.hpp"

namespace scalelab {

enum class Backend : int { kAuto, kLocal, kMpi };

// "auto", "local" or "mpi"; anything else is a ConfigError naming the choices.
Backend parse_backend(const std::string& name);
const char* backend_name(Backend b);
bool mpi_compiled_in();

class CommRuntime {
 public:
  // Initialises MPI when the backend needs it (mpi, or auto with MPI compiled in).
  CommRuntime(Backend backend, const CommOptions& options);
  ~CommRuntime();  // frees the world communicator, then MPI_Finalize
  CommRuntime(const CommRuntime&) = delete;
  CommRuntime& operator=(const CommRuntime&) = delete;

  Communicator& world();

  // Runs body(world) and returns its result. If body throws on a rank of a multi-rank job, that
  // rank prints "rank R of N failed: <what>; ending the job" and takes every rank down with a
  // non-zero exit (MPI_Abort: 2 for a ConfigError, 1 otherwise): a failing rank never leaves
  // the others waiting. With one rank the exception propagates to main() as usual.
  int run(const std::function<int(Communicator&)>& body);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace scalelab
