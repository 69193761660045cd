// Column- and row-parallel linear layers: stage 00's matmul plus the operators f and g.
#include "dist/tp_linear.hpp"

#include <cstddef>

#include "model/layers/matmul.hpp"

namespace scalelab {

void column_parallel_forward(TpGroup& tp, float* out, float* x_full, const float* x, const float* weight,
                             const float* bias, int N, int C, int OC_local) {
  // LAB 06 BEGIN column_parallel_forward: section 2
  // Every rank needs the whole input: f (identity, or the all-gather of the sequence shards).
  f_forward(tp, x, x_full, static_cast<std::size_t>(N), C);
  // This rank's output features: no sum over ranks, so no communication.
  matmul_forward(out, x_full, weight, bias, N, C, OC_local);
  // LAB 06 END
}

void column_parallel_backward(TpGroup& tp, float* dx, float* dx_full, float* dweight, float* dbias, const float* dout,
                              const float* x_full, const float* weight, int N, int C, int OC_local) {
  // LAB 06 BEGIN column_parallel_backward: section 2
  // dx_full = dout @ W_r: only this rank's output features' share of d loss / d x, and
  // dweight, dbias += this rank's rows (complete: they depend on this rank's features only).
  matmul_backward(dx_full, dweight, dbias, dout, x_full, weight, N, C, OC_local);
  // The input fed every rank's features, so its gradient is the sum over ranks: f's backward.
  f_backward(tp, dx_full, dx, static_cast<std::size_t>(N), C);
  // LAB 06 END
}

void row_parallel_forward(TpGroup& tp, float* y, float* y_partial, const float* x, const float* weight,
                          const float* bias, int N, int IC_local, int OC) {
  // LAB 06 BEGIN row_parallel_forward: section 2
  // This rank's input features' contribution to every output: a partial sum, without the bias
  // (added on every rank it would count t times).
  matmul_forward<float>(y_partial, x, weight, nullptr, N, IC_local, OC);
  // g: the sum over ranks (into all N rows, or into this rank's rows under sequence parallelism).
  g_forward(tp, y_partial, y, static_cast<std::size_t>(N), OC);
  // The bias once, after the sum.
  const std::size_t rows = tp.local_rows(static_cast<std::size_t>(N));
  for (std::size_t i = 0; i < rows; ++i)
    for (int j = 0; j < OC; ++j) y[i * OC + j] += bias[j];
  // LAB 06 END
}

void row_parallel_backward(TpGroup& tp, float* dx, float* dy_full, float* dweight, float* dbias, const float* dy,
                           const float* x, const float* weight, int N, int IC_local, int OC) {
  // LAB 06 BEGIN row_parallel_backward: section 2
  // The bias saw this rank's rows of y: its gradient is their column sums (all N rows without
  // sequence parallelism, the same on every rank; this rank's N/t with it, summed later).
  const std::size_t rows = tp.local_rows(static_cast<std::size_t>(N));
  for (std::size_t i = 0; i < rows; ++i)
    for (int j = 0; j < OC; ++j) dbias[j] += dy[i * OC + j];
  // g's backward: every rank needs d loss / d y for all N rows (identity, or an all-gather).
  g_backward(tp, dy, dy_full, static_cast<std::size_t>(N), OC);
  // dx = dy @ W_r (this rank's input features, complete) and dweight += dy^T @ x; no bias here.
  matmul_backward<float>(dx, dweight, nullptr, dy_full, x, weight, N, IC_local, OC);
  // LAB 06 END
}

}  // namespace scalelab
