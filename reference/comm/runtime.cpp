// The runtime: which backend makes the world communicator, and how a failure ends the job.
#include "comm/runtime.hpp"

#include <cstdio>
#include <exception>

#include "comm/local_communicator.hpp"
#include "core/error.hpp"
#ifdef SCALELAB_HAVE_MPI
#include "comm/mpi/mpi_communicator.hpp"
#endif

namespace scalelab {

Backend parse_backend(const std::string& name) {
  if (name == "auto") return Backend::kAuto;
  if (name == "local") return Backend::kLocal;
  if (name == "mpi") return Backend::kMpi;
  throw ConfigError("backend: unknown backend '" + name + "'; choose auto, local or mpi");
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kAuto: return "auto";
    case Backend::kLocal: return "local";
    case Backend::kMpi: return "mpi";
  }
  return "?";
}

bool mpi_compiled_in() {
#ifdef SCALELAB_HAVE_MPI
  return true;
#else
  return false;
#endif
}

struct CommRuntime::Impl {
#ifdef SCALELAB_HAVE_MPI
  std::unique_ptr<MpiSession> session;  // declared first: destroyed after the world
#endif
  std::unique_ptr<Communicator> world;
};

CommRuntime::CommRuntime(Backend backend, const CommOptions& options) : impl_(std::make_unique<Impl>()) {
  if (backend == Backend::kAuto) backend = mpi_compiled_in() ? Backend::kMpi : Backend::kLocal;
  if (backend == Backend::kLocal) {
    impl_->world = std::make_unique<LocalCommunicator>();
    return;
  }
#ifdef SCALELAB_HAVE_MPI
  impl_->session = std::make_unique<MpiSession>();
  impl_->world = impl_->session->world(options);
#else
  (void)options;
  throw ConfigError(
      "backend: mpi was asked for, but this build has no MPI; install OpenMPI (apt-get install libopenmpi-dev "
      "openmpi-bin) and reconfigure, or use --backend local");
#endif
}

CommRuntime::~CommRuntime() = default;

Communicator& CommRuntime::world() { return *impl_->world; }

int CommRuntime::run(const std::function<int(Communicator&)>& body) {
  Communicator& w = world();
  try {
    return body(w);
  } catch (const std::exception& e) {
    if (w.size() == 1) throw;
    const int code = dynamic_cast<const ConfigError*>(&e) ? 2 : 1;
    const std::string message = "rank " + std::to_string(w.rank()) + " of " + std::to_string(w.size()) +
                                " failed: " + e.what() + "; ending the job";
#ifdef SCALELAB_HAVE_MPI
    MpiSession::abort_job(message, code);
#else
    throw;  // unreachable: without MPI every world has one rank
#endif
  }
}

}  // namespace scalelab
