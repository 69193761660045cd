// The kernel of the elementwise layers (GELU, the residual add, their backwards; launched by
// kernels/core/elementwise.cuh's launch_elementwise, and run on the CPU by tests/simt/): an
// operation that turns the values at index i of Op::kIn input tensors into the values at index i
// of Op::kOut output tensors, in fp32, for every i < n. They do a few flops per value, so their
// speed is the memory's, and the kernel is built for that (as grad_ops_kernels.cuh's scaling):
//  - 16-byte accesses: each thread loads a Pack16 (8 bf16/fp16 or 4 fp32 values) of every input
//    with one 128-bit load, and stores the outputs the same way;
//  - kElementwiseUnroll packs in flight per thread: all its loads go out before any value is
//    used, so the memory is kept busy while the thread waits;
//  - a scalar head (values before the tensors' first common 16-byte boundary) and tail (after
//    the last whole pack). Tensors at different offsets from a 16-byte boundary have no pack
//    aligned in all of them: then every value goes through the scalar path.
// An output may be the same tensor as an input (in place): each value is read and then written
// by the same thread, and no other thread touches it. Partly overlapping tensors are not allowed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/core/dtype.cuh"

namespace scalelab::cuda {

// The tensors of one call, n values each: Op reads in[0..kIn) and writes out[0..kOut).
template <typename F, int kIn, int kOut>
struct ElementwiseTensors {
  const F* in[kIn];
  F* out[kOut];
};

// Packs per thread per loop iteration: one 16-byte load at a time per input leaves the memory
// idle while the thread waits on it; four keep 4 * 16 bytes per input per thread in flight.
constexpr int kElementwiseUnroll = 4;

// Op::operator()(const float* x, float* y): y[0..kOut) from x[0..kIn), the values of one index.
template <typename F, typename Op>
__device__ __forceinline__ void apply_at(const Op& op, const ElementwiseTensors<F, Op::kIn, Op::kOut>& t,
                                         std::size_t i) {
  float x[Op::kIn], y[Op::kOut];
#pragma unroll
  for (int k = 0; k < Op::kIn; ++k) x[k] = to_float(t.in[k][i]);
  op(x, y);
#pragma unroll
  for (int k = 0; k < Op::kOut; ++k) t.out[k][i] = from_float<F>(y[k]);
}

template <typename F, typename Op>
__global__ void elementwise_kernel(Op op, ElementwiseTensors<F, Op::kIn, Op::kOut> t, std::size_t n, Split s) {
  constexpr int kSize = Pack16<F>::kSize;
  const std::size_t tid = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = tid; i < s.head; i += stride) apply_at(op, t, i);
  for (std::size_t i = s.tail_begin + tid; i < n; i += stride) apply_at(op, t, i);

  for (std::size_t p0 = tid; p0 < s.packs; p0 += kElementwiseUnroll * stride) {
    Pack16<F> in[kElementwiseUnroll][Op::kIn];
#pragma unroll
    for (int u = 0; u < kElementwiseUnroll; ++u) {  // all the loads first, then the arithmetic
      const std::size_t p = p0 + u * stride;
      if (p < s.packs)
#pragma unroll
        for (int k = 0; k < Op::kIn; ++k) in[u][k] = load_pack(t.in[k] + s.head + p * kSize);
    }
#pragma unroll
    for (int u = 0; u < kElementwiseUnroll; ++u) {
      const std::size_t p = p0 + u * stride;
      if (p >= s.packs) break;
      Pack16<F> out[Op::kOut];
#pragma unroll
      for (int e = 0; e < kSize; ++e) {
        float x[Op::kIn], y[Op::kOut];
#pragma unroll
        for (int k = 0; k < Op::kIn; ++k) x[k] = to_float(in[u][k].v[e]);
        op(x, y);
#pragma unroll
        for (int k = 0; k < Op::kOut; ++k) out[k].v[e] = from_float<F>(y[k]);
      }
#pragma unroll
      for (int k = 0; k < Op::kOut; ++k) store_pack(t.out[k] + s.head + p * kSize, out[k]);
    }
  }
}

// How launch_elementwise launches the kernel over the n values of the tensors of t: the split it
// gets and the blocks of kThreads threads.
struct ElementwiseLaunch {
  Split split;
  unsigned blocks;
};
template <typename F, int kIn, int kOut>
ElementwiseLaunch elementwise_launch(const ElementwiseTensors<F, kIn, kOut>& t, std::size_t n) {
  // One split serves all the tensors where they sit at the same offset from a 16-byte boundary;
  // where they do not, no pack is aligned in all of them, and every value is the scalar head.
  const auto offset = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16; };
  bool same_offset = true;
  for (const F* p : t.in) same_offset &= offset(p) == offset(t.out[0]);
  for (const F* p : t.out) same_offset &= offset(p) == offset(t.out[0]);
  const Split s = same_offset ? split_at_16_bytes(t.out[0], n) : Split{n, 0, n};
  // A thread for every kElementwiseUnroll packs, and at least one for each value of the head and
  // of the tail (the loops are grid-stride, so blocks_for may cap the grid).
  const std::size_t threads = std::max(
      {(s.packs + kElementwiseUnroll - 1) / kElementwiseUnroll, s.head, n - s.tail_begin, std::size_t{1}});
  return {s, blocks_for(threads)};
}

}  // namespace scalelab::cuda
