// Linear layer forward and backward: three matrix products through BLAS, plus the bias.
#include "model/layers/matmul.hpp"

#include <algorithm>
#include <cstddef>

#include "core/blas.hpp"

namespace scalelab {

template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC) {
  // With a bias, every row of out starts as the bias and the product is added to it (beta = 1):
  // one pass over out fewer than adding the bias afterwards.
  if (bias)
    for (int i = 0; i < N; ++i) std::copy(bias, bias + OC, out + static_cast<std::size_t>(i) * OC);
  gemm<F>(false, true, N, OC, C, F(1), inp, C, weight, C, bias ? F(1) : F(0), out, OC);
}

template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, int N, int C,
                     int OC) {
  // LAB 00 BEGIN matmul_backward: section 3.3
  // dinp (N,C) = dout (N,OC) @ weight (OC,C)
  gemm<F>(false, false, N, C, OC, F(1), dout, OC, weight, C, F(0), dinp, C);
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
  gemm<F>(true, false, OC, C, N, F(1), dout, OC, inp, C, F(1), dweight, C);
  if (dbias)
    for (int i = 0; i < N; ++i) {
      const F* d = dout + static_cast<std::size_t>(i) * OC;
      for (int j = 0; j < OC; ++j) dbias[j] += d[j];
    }
  // LAB 00 END
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int, int);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int, int);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*, const float*, int, int, int);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*, const double*, int, int,
                                      int);

}  // namespace scalelab
