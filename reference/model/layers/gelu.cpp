// GELU (tanh form) forward and backward, elementwise. fast_exp and fast_tanh (core/fastmath.hpp),
// unlike std::exp and std::tanh, let these loops compile to SIMD code.
#include "model/layers/gelu.hpp"

#include "core/fastmath.hpp"

namespace scalelab {

namespace {
template <typename F>
constexpr F kSqrt2OverPi = F(0.7978845608028654);  // sqrt(2 / pi)
}

template <typename F>
void gelu_forward(F* out, const F* inp, std::size_t N) {
  for (std::size_t i = 0; i < N; ++i) {
    const F x = inp[i];
    const F u = kSqrt2OverPi<F> * (x + F(0.044715) * x * x * x);
    // 0.5 (1 + tanh u) is the logistic sigmoid of 2u: one exp and one division, cheaper than tanh
    out[i] = x / (F(1) + fast_exp(F(-2) * u));
  }
}

template <typename F>
void gelu_backward(F* dinp, const F* dout, const F* inp, std::size_t N) {
  // LAB 00 BEGIN gelu_backward: section 3.4
  for (std::size_t i = 0; i < N; ++i) {
    const F x = inp[i];
    const F u = kSqrt2OverPi<F> * (x + F(0.044715) * x * x * x);
    const F th = fast_tanh(u);
    const F du_dx = kSqrt2OverPi<F> * (F(1) + F(3 * 0.044715) * x * x);
    const F grad = F(0.5) * (F(1) + th) + F(0.5) * x * (F(1) - th * th) * du_dx;
    dinp[i] = grad * dout[i];
  }
  // LAB 00 END
}

template void gelu_forward<float>(float*, const float*, std::size_t);
template void gelu_forward<double>(double*, const double*, std::size_t);
template void gelu_backward<float>(float*, const float*, const float*, std::size_t);
template void gelu_backward<double>(double*, const double*, const double*, std::size_t);

}  // namespace scalelab
