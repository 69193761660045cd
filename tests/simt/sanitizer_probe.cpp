// Under the sanitizers only (tests/simt/CMakeLists.txt): a kernel that writes one element past an
// array, run on the emulation, must stop with AddressSanitizer's report, whose kind CTest checks.
// This is why CI's sanitizer job runs the emulated kernel tests: there an out-of-bounds access of a
// CUDA kernel shows without a GPU.
//   sanitizer_probe heap    the block's last thread writes one past a global buffer (a vector's data)
//   sanitizer_probe stack   every thread fills a local array, meets the others at __syncthreads (a
//                           switch to the other fibers and back), then the last one writes one past
//                           its array: the redzones around its frame must have survived the switches
#include "simt.hpp"  // first: it defines CUDA's keywords for the host compiler

#include <cstdio>
#include <string>
#include <vector>

namespace {

namespace simt = scalelab::simt;

constexpr int kThreads = 64;
constexpr int kLocal = 8;

void heap_kernel(float* out) { out[threadIdx.x + 1] = 1.0f; }  // out holds kThreads floats

// n == kLocal, passed at run time so that the compiler cannot prove the write out of bounds.
void stack_kernel(float* out, int n) {
  float local[kLocal];
  for (int i = 0; i < n; ++i) local[i] = static_cast<float>(threadIdx.x + i);
  __syncthreads();
  const bool last = threadIdx.x == blockDim.x - 1;
  float* p = local;  // through a pointer: UBSan's bounds check would stop an index of local first
  p[last ? n : n - 1] = 0.0f;
  out[threadIdx.x] = local[0] + local[n - 1];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc == 2 ? argv[1] : "";
  std::vector<float> out(kThreads);
  if (what == "heap") {
    simt::launch(dim3(1), dim3(kThreads), 0, [&] { heap_kernel(out.data()); });
  } else if (what == "stack") {
    const int n = static_cast<int>(what.size()) + kLocal - 5;  // kLocal: "stack" has 5 letters
    simt::launch(dim3(1), dim3(kThreads), 0, [&] { stack_kernel(out.data(), n); });
  } else {
    std::fprintf(stderr, "usage: sanitizer_probe heap|stack\n");
    return 2;
  }
  std::printf("sanitizer_probe %s: no report, the write past the array went unseen\n", what.c_str());
  return 0;
}
