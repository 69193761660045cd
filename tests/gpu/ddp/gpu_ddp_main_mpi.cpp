// main() of test_gpu_ddp_mpi, run under mpiexec: every rank shares the one GPU (the case NCCL
// refuses, and the host-staging communicator exists for). The GPU check comes before MPI starts,
// so without a GPU every rank exits 77 alike (CTest: skipped) and none waits for another. Then
// the tests run on every rank and all ranks exit with the worst result, as in tests/comm.
#include <cstdio>

#include "comm/runtime.hpp"
#include "gpu_catch.hpp"
#include "kernels/core/device.hpp"
#include "world.hpp"

namespace {
scalelab::Communicator* g_world = nullptr;
}

scalelab::Communicator& scalelab_test::test_world() { return *g_world; }

int main(int argc, char** argv) {
  if (scalelab::cuda::device_count() == 0) {
    std::fprintf(stderr, "test_gpu_ddp_mpi: no CUDA GPU on this machine; skipped\n");
    return 77;
  }
  scalelab::CommOptions options;
  options.timeout_seconds = 60;  // a rank left waiting ends the job with a message, never a hang
  scalelab::CommRuntime runtime(scalelab::Backend::kMpi, options);
  g_world = &runtime.world();
  if (g_world->rank() == 0)
    std::printf("test_gpu_ddp_mpi (%d MPI ranks, one GPU) on %s\n", g_world->size(),
                scalelab::cuda::device_description().c_str());
  const int failed = scalelab_test::run_gpu_catch(argc, argv);
  int worst = failed;
  runtime.world().all_reduce(&worst, 1);
  g_world = nullptr;
  return worst == 0 ? 0 : 1;
}
