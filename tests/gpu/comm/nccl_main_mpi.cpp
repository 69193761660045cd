// main() of test_nccl_mpi, run under mpiexec with one rank per GPU. Without a GPU every rank
// exits 77 (skipped) before MPI starts, so none waits for another. With fewer GPUs on this host
// than ranks on it, NCCL cannot run (it refuses two ranks on one GPU): then only the [refusal]
// test runs, which checks that make_nccl_communicator says so on every rank. All ranks exit
// with the worst result, as in tests/comm.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "comm/runtime.hpp"
#include "gpu_catch.hpp"
#include "kernels/core/device.hpp"
#include "nccl_world.hpp"

namespace {
scalelab::Communicator* g_world = nullptr;
scalelab::cuda::NcclCommunicator* g_nccl = nullptr;

// Ranks mpiexec started on this host (OpenMPI, MPICH/Hydra, Slurm), read before MPI starts.
int local_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 1;
}
}  // namespace

scalelab::Communicator& scalelab_test::test_world() { return *g_world; }
scalelab::cuda::NcclCommunicator& scalelab_test::nccl_world() { return *g_nccl; }

int main(int argc, char** argv) {
  const int gpus = scalelab::cuda::device_count();
  if (gpus == 0) {
    std::fprintf(stderr, "test_nccl_mpi: skipped: no CUDA device\n");
    return 77;
  }
  scalelab::CommOptions options;
  options.timeout_seconds = 60;  // a rank left waiting ends the job with a message, never a hang
  scalelab::CommRuntime runtime(scalelab::Backend::kMpi, options);
  g_world = &runtime.world();
  std::unique_ptr<scalelab::cuda::NcclCommunicator> nccl;
  const bool one_per_gpu = local_ranks() <= gpus;
  if (one_per_gpu) {
    nccl = scalelab::cuda::make_nccl_communicator(*g_world, scalelab_test::nccl_test_options());
    g_nccl = nccl.get();
  }
  if (g_world->rank() == 0)
    std::printf("test_nccl_mpi (%d ranks, %d per host, %d GPUs here%s) on %s\n", g_world->size(), local_ranks(), gpus,
                one_per_gpu ? "" : ": only the refusal test", scalelab::cuda::device_description().c_str());
  // Without a GPU of its own per rank, only the refusal test.
  const int failed = scalelab_test::run_gpu_catch(
      argc, argv, one_per_gpu ? std::vector<std::string>{} : std::vector<std::string>{"[refusal]"});
  int worst = failed;
  g_world->all_reduce(&worst, 1);
  g_nccl = nullptr;
  nccl.reset();
  g_world = nullptr;
  return worst == 0 ? 0 : 1;
}
