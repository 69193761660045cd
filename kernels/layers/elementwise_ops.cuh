// The elementwise layers' operations on the values of one index, in fp32: GELU and the residual
// add, forward and backward. kernels/core/elementwise.cuh runs them over whole tensors
// (gelu.cu, residual.cu launch them); tests/simt/ runs the same kernel and operations on the CPU.
#pragma once

#include <cmath>
#include <type_traits>

#include "kernels/core/dtype.cuh"
#include "kernels/core/ptx.cuh"

namespace scalelab::cuda {

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2 / pi)

// tanh in the forward. fp32 and fp16: tanhf. bf16: the hardware's tanh.approx.f32 (sm_75+), one
// instruction where tanhf is about 17 (an exp, a reciprocal, a polynomial, selects): at full
// bandwidth (~3.5 TB/s) the bf16 forward, 4 bytes a value, has about 35 instructions a value to
// spend (132 SMs x 128 lanes x ~1.9 GHz / 875 G values/s), and tanhf would take half of them.
// Its relative error, up to 2^-11, moves the output 0.5 x (1 + tanh u) by at most about 2^-12 |x|:
// over the tensor, in norm, well under bf16's own rounding (2^-9 relative a value). With every
// tanh off by the full 2^-11 in the same direction, over the test's inputs (|x| < 4), the error
// ||gpu - cpu|| / ||cpu|| is 1.26e-3, against 1.22e-3 from the rounding to bf16 alone.
// Not in fp16, whose rounding is 8x finer: the same case gives 4.4e-4 against 1.7e-4 (the
// tolerance is 2e-3). Not in the backward: there 1 - tanh^2, small where tanh nears +-1, turns
// the approximation's error into a relative error of the gradient as large as a bf16 rounding
// (worst case 3.2e-3 against 1.6e-3 alone), and with 6 bytes a value it can afford tanhf.
template <typename F>
__device__ __forceinline__ float forward_tanh(float u) {
  if constexpr (std::is_same_v<F, bf16>)
    return ptx::tanh_approx(u);
  else
    return tanhf(u);
}

// y[0] = gelu(x[0]) = 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3).
template <typename F>
struct GeluForward {
  static constexpr int kIn = 1, kOut = 1;
  __device__ void operator()(const float* x, float* y) const {
    const float u = kSqrt2OverPi * (x[0] + 0.044715f * x[0] * x[0] * x[0]);
    y[0] = 0.5f * x[0] * (1.0f + forward_tanh<F>(u));
  }
};

// y[0] = gelu'(inp) * dout, x = {dout, inp}.
struct GeluBackward {
  static constexpr int kIn = 2, kOut = 1;
  __device__ void operator()(const float* x, float* y) const {
    const float dout = x[0], xi = x[1];
    const float u = kSqrt2OverPi * (xi + 0.044715f * xi * xi * xi);
    const float th = tanhf(u);
    const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * xi * xi);
    const float grad = 0.5f * (1.0f + th) + 0.5f * xi * (1.0f - th * th) * du_dx;
    y[0] = grad * dout;
  }
};

// y[0] = a + b, x = {a, b}.
struct ResidualForward {
  static constexpr int kIn = 2, kOut = 1;
  __device__ void operator()(const float* x, float* y) const { y[0] = x[0] + x[1]; }
};

// y = {da + dout, db + dout}, x = {da, db, dout}: the gradient flows unchanged into both branches.
struct ResidualBackward {
  static constexpr int kIn = 3, kOut = 2;
  __device__ void operator()(const float* x, float* y) const {
    y[0] = x[0] + x[2];
    y[1] = x[1] + x[2];
  }
};

}  // namespace scalelab::cuda
