// main() of test_nccl: one rank, NCCL bootstrapped from a LocalCommunicator (no MPI). Without a
// GPU (no device, no driver) it exits with 77, which CTest reports as "skipped", never "passed".
#include <cstdio>
#include <memory>

#include "comm/local_communicator.hpp"
#include "gpu_catch.hpp"
#include "kernels/core/device.hpp"
#include "nccl_world.hpp"

namespace {
scalelab::cuda::NcclCommunicator* g_nccl = nullptr;
}

scalelab::Communicator& scalelab_test::test_world() {
  static scalelab::LocalCommunicator world;
  return world;
}
scalelab::cuda::NcclCommunicator& scalelab_test::nccl_world() { return *g_nccl; }

int main(int argc, char** argv) {
  if (scalelab::cuda::device_count() == 0) {
    std::fprintf(stderr, "test_nccl: skipped: no CUDA device\n");
    return 77;
  }
  auto nccl = scalelab::cuda::make_nccl_communicator(scalelab_test::test_world(), scalelab_test::nccl_test_options());
  g_nccl = nccl.get();
  std::printf("test_nccl (1 rank) on %s\n", scalelab::cuda::device_description().c_str());
  const int failed = scalelab_test::run_gpu_catch(argc, argv);
  g_nccl = nullptr;
  return failed == 0 ? 0 : 1;
}
