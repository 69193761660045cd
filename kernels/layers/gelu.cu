// GELU forward and backward, elementwise in fp32, run by the elementwise kernel
// (kernels/core/elementwise.cuh: 16-byte accesses, several packs in flight per thread). Bytes
// per value: the forward reads inp and writes out, 2 * sizeof(F); the backward reads dout and inp
// and writes dinp, 3 * sizeof(F).
#include "kernels/core/elementwise.cuh"
#include "kernels/layers/elementwise_ops.cuh"
#include "kernels/layers/gelu.hpp"

namespace scalelab::cuda {

template <typename F>
void gelu_forward(F* out, const F* inp, std::size_t N, cudaStream_t stream) {
  launch_elementwise(GeluForward<F>{}, ElementwiseTensors<F, 1, 1>{{inp}, {out}}, N, stream);
}

template <typename F>
void gelu_backward(F* dinp, const F* dout, const F* inp, std::size_t N, cudaStream_t stream) {
  // dinp may be dout (in place): each value is read before it is written, by the same thread.
  launch_elementwise(GeluBackward{}, ElementwiseTensors<F, 2, 1>{{dout, inp}, {dinp}}, N, stream);
}

#define SCALELAB_INSTANTIATE(F)                                           \
  template void gelu_forward<F>(F*, const F*, std::size_t, cudaStream_t); \
  template void gelu_backward<F>(F*, const F*, const F*, std::size_t, cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
