// LayerNorm forward and backward as plain loops over rows.
#include "model/layers/layernorm.hpp"

#include <cmath>
#include <cstddef>

#include "core/reduce.hpp"

namespace scalelab {

template <typename F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight, const F* bias, int N, int C) {
  const F eps = F(1e-5);
  for (int i = 0; i < N; ++i) {
    const F* x = inp + static_cast<std::size_t>(i) * C;
    F* o = out + static_cast<std::size_t>(i) * C;
    const F m = reduce_sum(x, C) / C;
    for (int c = 0; c < C; ++c) o[c] = x[c] - m;  // centred input, kept in out for the next two steps
    const F v = reduce_dot(o, o, C) / C;          // biased variance
    const F s = F(1) / std::sqrt(v + eps);
    for (int c = 0; c < C; ++c) o[c] = o[c] * s * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, const F* mean,
                        const F* rstd, int N, int C) {
  // LAB 00 BEGIN layernorm_backward: section 3.2
  for (int i = 0; i < N; ++i) {
    const F* d = dout + static_cast<std::size_t>(i) * C;
    const F* x = inp + static_cast<std::size_t>(i) * C;
    F* dx = dinp + static_cast<std::size_t>(i) * C;
    const F m = mean[i], s = rstd[i];
    // dnorm = dout * weight; dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat))
    // (sum_over: core/reduce.hpp, a sum over c of the term)
    const F dnorm_mean = sum_over<F>(C, [&](int c) { return d[c] * weight[c]; }) / C;
    const F dnorm_xhat_mean = sum_over<F>(C, [&](int c) { return d[c] * weight[c] * ((x[c] - m) * s); }) / C;
    for (int c = 0; c < C; ++c) {
      const F xhat = (x[c] - m) * s;
      const F dnorm = d[c] * weight[c];
      dx[c] += s * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
    }
    // The parameter gradients in a loop of their own: with fewer arrays per loop the compiler can
    // check at run time that they do not overlap and use SIMD.
    for (int c = 0; c < C; ++c) {
      const F xhat = (x[c] - m) * s;
      dbias[c] += d[c];
      dweight[c] += xhat * d[c];
    }
  }
  // LAB 00 END
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int, int);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*, int,
                                        int);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                        const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, int, int);

}  // namespace scalelab
