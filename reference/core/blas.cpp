// BLAS thread control (OpenBLAS).
#include "core/blas.hpp"

extern "C" void openblas_set_num_threads(int);

namespace scalelab {
void set_blas_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}
}  // namespace scalelab
