// Softmax + cross-entropy forward and its fused backward.
#include "model/layers/crossentropy.hpp"

#include <cmath>
#include <cstddef>

#include "core/fastmath.hpp"
#include "core/reduce.hpp"

namespace scalelab {

template <typename F>
F crossentropy_forward(F* probs, F* losses, const F* logits, const int* targets, int N, int V) {
  double total = 0;  // the mean over up to millions of rows: accumulate in double
  for (int i = 0; i < N; ++i) {
    const F* z = logits + static_cast<std::size_t>(i) * V;
    F* p = probs + static_cast<std::size_t>(i) * V;
    const F maxv = reduce_max(z, V);
    const F target_logit = z[targets[i]];  // read before probs (which may alias z) overwrite it
    for (int j = 0; j < V; ++j) p[j] = fast_exp(z[j] - maxv);
    const F sum = reduce_sum(p, V);
    const F inv = F(1) / sum;
    for (int j = 0; j < V; ++j) p[j] *= inv;
    // -log p[target] as log-sum-exp: finite even where p[target] underflows to zero
    losses[i] = std::log(sum) - (target_logit - maxv);
    total += losses[i];
  }
  return static_cast<F>(total / N);
}

template <typename F>
void crossentropy_backward(F* dlogits, const F* probs, const int* targets, F dloss, int N, int V) {
  // LAB 00 BEGIN crossentropy_backward: section 3.7
  for (int i = 0; i < N; ++i) {
    const F* p = probs + static_cast<std::size_t>(i) * V;
    F* d = dlogits + static_cast<std::size_t>(i) * V;
    for (int j = 0; j < V; ++j) d[j] = p[j] * dloss;
    d[targets[i]] -= dloss;
  }
  // LAB 00 END
}

template float crossentropy_forward<float>(float*, float*, const float*, const int*, int, int);
template double crossentropy_forward<double>(double*, double*, const double*, const int*, int, int);
template void crossentropy_backward<float>(float*, const float*, const int*, float, int, int);
template void crossentropy_backward<double>(double*, const double*, const int*, double, int, int);

}  // namespace scalelab
