// main() of test_nccl: one rank, NCCL bootstrapped from a LocalCommunicator (no MPI). Without a
// GPU (no device, no driver) it exits with 77, which CTest reports as "skipped", never "passed".
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <memory>

#include "comm/local_communicator.hpp"
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
  const int failed = Catch::Session().run(argc, argv);
  g_nccl = nullptr;
  return failed == 0 ? 0 : 1;
}
