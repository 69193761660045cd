// main() of test_gpu_kernels: without a GPU (no device, no driver) it prints one line and exits
// with 77, which CTest reports as "skipped" (SKIP_RETURN_CODE), never as "passed".
#include <cstdio>

#include "gpu_catch.hpp"
#include "kernels/core/device.hpp"

int main(int argc, char** argv) {
  if (scalelab::cuda::device_count() == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  std::printf("test_gpu_kernels on %s\n", scalelab::cuda::device_description().c_str());
  return scalelab_test::run_gpu_catch(argc, argv);
}
