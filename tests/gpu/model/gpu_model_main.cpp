// main() of test_gpu_model: without a GPU (no device, no driver) it exits with 77, which CTest
// reports as "skipped" (SKIP_RETURN_CODE), never as "passed".
#include <cstdio>

#include "gpu_catch.hpp"
#include "kernels/core/device.hpp"

int main(int argc, char** argv) {
  if (scalelab::cuda::device_count() == 0) {
    std::fprintf(stderr, "test_gpu_model: no CUDA GPU on this machine; skipped\n");
    return 77;
  }
  std::printf("test_gpu_model on %s\n", scalelab::cuda::device_description().c_str());
  return scalelab_test::run_gpu_catch(argc, argv);
}
