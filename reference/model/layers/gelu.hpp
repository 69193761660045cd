// GELU with the tanh approximation (GPT-2's): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once
#include <cstddef>
namespace scalelab {
// out, inp (N) elementwise
template <typename F>
void gelu_forward(F* out, const F* inp, std::size_t N);
// dinp (N) = (written; may alias dout); dout, inp (N)
template <typename F>
void gelu_backward(F* dinp, const F* dout, const F* inp, std::size_t N);
}  // namespace scalelab
