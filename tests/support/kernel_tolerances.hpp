// The tolerances of the kernel tests, one place for the GPU tests (tests/gpu/kernels) and the
// emulated ones (tests/simt): how far a kernel's output may be from its CPU twin's, as the
// relative norm error ||kernel - cpu|| / ||cpu||, by storage type.
#pragma once

#include <type_traits>

#include "kernels/core/dtype.hpp"

namespace scalelab_test {

// Allowed relative error ||gpu - cpu|| / ||cpu|| of a kernel's output, by storage type:
//  fp32  1e-5: both sides round every operation to fp32 (unit roundoff 6e-8); only the order of
//        sums differs (warp shuffles, cuBLAS's blocking vs OpenBLAS's), which over the few
//        hundred to thousand terms summed here costs well under 1e-5. Products run with TF32
//        off: TF32's 10-bit inputs alone would give about 5e-4.
//  bf16  1e-2: the kernel rounds its output (and stored intermediates such as attention's
//        probabilities) to 8 significant bits, 2^-9 = 2e-3 relative per rounding; a few
//        roundings in a row stay below 1e-2.
//  fp16  2e-3: the same with 11 significant bits, 2^-12 = 2.4e-4 per rounding.
template <typename F>
constexpr double rel_tolerance() {
  if constexpr (std::is_same_v<F, scalelab::cuda::bf16>)
    return 1e-2;
  else if constexpr (std::is_same_v<F, scalelab::cuda::fp16>)
    return 2e-3;
  else
    return 1e-5;
}

}  // namespace scalelab_test
