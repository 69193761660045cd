// Embedding lookup and its backward (a scatter-add into the rows that were looked up).
#include "model/layers/encoder.hpp"

#include <cstddef>

namespace scalelab {

template <typename F>
void encoder_forward(F* out, const int* tokens, const F* wte, const F* wpe, int B, int T, int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      F* o = out + (static_cast<std::size_t>(b) * T + t) * C;
      const F* te = wte + static_cast<std::size_t>(tokens[b * T + t]) * C;
      const F* pe = wpe + static_cast<std::size_t>(t) * C;
      for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
    }
}

template <typename F>
void encoder_backward(F* dwte, F* dwpe, const F* dout, const int* tokens, int B, int T, int C) {
  // LAB 00 BEGIN encoder_backward: section 3.1
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const F* d = dout + (static_cast<std::size_t>(b) * T + t) * C;
      F* dte = dwte + static_cast<std::size_t>(tokens[b * T + t]) * C;
      F* dpe = dwpe + static_cast<std::size_t>(t) * C;
      for (int c = 0; c < C; ++c) {
        dte[c] += d[c];
        dpe[c] += d[c];
      }
    }
  // LAB 00 END
}

template void encoder_forward<float>(float*, const int*, const float*, const float*, int, int, int);
template void encoder_forward<double>(double*, const int*, const double*, const double*, int, int, int);
template void encoder_backward<float>(float*, float*, const float*, const int*, int, int, int);
template void encoder_backward<double>(double*, double*, const double*, const int*, int, int, int);

}  // namespace scalelab
