// Shared pieces of the emulated kernel tests (tests/simt/test_*_emulated.cpp), the counterpart of
// tests/gpu/kernels/gpu_test_util.hpp for kernels run by the CPU emulation: "device" tensors are
// host vectors of the kernel's storage type F (host_tensor.hpp), so a kernel reads and writes them
// directly. The host side (tolerances, random inputs rounded to F, comparisons with the CPU twin)
// is the GPU tests' own: tests/support/kernel_checks.hpp.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "host_tensor.hpp"
#include "kernel_checks.hpp"
#include "simt.hpp"

namespace scalelab_simt_test {

using namespace scalelab_kernel_test;

// CHECKs that every ldmatrix of a launch took the fewest shared-memory wavefronts its bytes allow.
inline void check_no_bank_conflicts(const std::string& what, const scalelab::simt::LaunchStats& stats) {
  INFO(what << ": ldmatrix took " << stats.shared_wavefronts << " shared-memory wavefronts where "
            << stats.shared_wavefronts_min << " would do without bank conflicts");
  CHECK(stats.shared_wavefronts == stats.shared_wavefronts_min);
}

}  // namespace scalelab_simt_test
