// Residual add and its backward, elementwise, run by the elementwise kernel
// (kernels/core/elementwise.cuh: 16-byte accesses, several packs in flight per thread). Bytes
// per value: the forward reads a and b and writes out, 3 * sizeof(F); the backward reads dout, da
// and db and writes da and db, 5 * sizeof(F).
#include "kernels/core/elementwise.cuh"
#include "kernels/layers/elementwise_ops.cuh"
#include "kernels/layers/residual.hpp"

namespace scalelab::cuda {

template <typename F>
void residual_forward(F* out, const F* a, const F* b, std::size_t N, cudaStream_t stream) {
  launch_elementwise(ResidualForward{}, ElementwiseTensors<F, 2, 1>{{a, b}, {out}}, N, stream);
}

template <typename F>
void residual_backward(F* da, F* db, const F* dout, std::size_t N, cudaStream_t stream) {
  // da and db are read and written in place (+=), each value by one thread.
  launch_elementwise(ResidualBackward{}, ElementwiseTensors<F, 3, 2>{{da, db, dout}, {da, db}}, N, stream);
}

#define SCALELAB_INSTANTIATE(F)                                                         \
  template void residual_forward<F>(F*, const F*, const F*, std::size_t, cudaStream_t); \
  template void residual_backward<F>(F*, F*, const F*, std::size_t, cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
