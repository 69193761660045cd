// main() of test_gpu_ddp: one rank (a LocalCommunicator as the world). Without a GPU (no device,
// no driver) it exits with 77, which CTest reports as "skipped", never as "passed".
#include <cstdio>

#include "comm/local_communicator.hpp"
#include "gpu_catch.hpp"
#include "kernels/core/device.hpp"
#include "world.hpp"

scalelab::Communicator& scalelab_test::test_world() {
  static scalelab::LocalCommunicator world;
  return world;
}

int main(int argc, char** argv) {
  if (scalelab::cuda::device_count() == 0) {
    std::fprintf(stderr, "test_gpu_ddp: no CUDA GPU on this machine; skipped\n");
    return 77;
  }
  std::printf("test_gpu_ddp (1 local rank) on %s\n", scalelab::cuda::device_description().c_str());
  return scalelab_test::run_gpu_catch(argc, argv);
}
