// LayerNorm kernels. Forward: one warp per row (its C values are spread over the 32 lanes, the
// sums are warp shuffles), two passes like the CPU twin (mean, then the variance around it).
// Backward in three kernels: one warp per row for dinp (which needs two row sums), and for
// dweight/dbias one thread column per channel summing a chunk of the rows, then the chunks added
// in order, so no atomics are needed and the sums are the same on every run.
#include <algorithm>

#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/layernorm.hpp"

namespace scalelab::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block in the row kernels (256 threads)

template <typename F>
__global__ void layernorm_forward_kernel(F* out, float* mean, float* rstd, const F* inp, const F* weight, const F* bias,
                                         int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;  // the whole warp leaves together: the shuffles below stay full-warp
  const F* x = inp + static_cast<std::size_t>(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += to_float(x[c]);
  const float m = warp_sum(sum) / C;
  float sq = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_float(x[c]) - m;
    sq += d * d;
  }
  const float v = warp_sum(sq) / C;
  const float s = 1.0f / sqrtf(v + 1e-5f);
  F* o = out + static_cast<std::size_t>(row) * C;
  for (int c = lane; c < C; c += 32)
    o[c] = from_float<F>((to_float(x[c]) - m) * s * to_float(weight[c]) + to_float(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp[i,c] += rstd * (dnorm - mean_c(dnorm) - xhat * mean_c(dnorm * xhat)), dnorm = dout * weight.
template <typename F>
__global__ void layernorm_backward_input_kernel(F* dinp, const F* dout, const F* inp, const F* weight,
                                                const float* mean, const float* rstd, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;
  const std::size_t off = static_cast<std::size_t>(row) * C;
  const F* d = dout + off;
  const F* x = inp + off;
  F* dx = dinp + off;
  const float m = mean[row], s = rstd[row];
  float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (to_float(x[c]) - m) * s;
    const float dnorm = to_float(d[c]) * to_float(weight[c]);
    dnorm_sum += dnorm;
    dnorm_xhat_sum += dnorm * xhat;
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / C;
  const float dnorm_xhat_mean = warp_sum(dnorm_xhat_sum) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (to_float(x[c]) - m) * s;
    const float dnorm = to_float(d[c]) * to_float(weight[c]);
    dx[c] = from_float<F>(to_float(dx[c]) + s * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean));
  }
}

// Partial sums of dweight[c] = sum_i xhat[i,c] * dout[i,c] and dbias[c] = sum_i dout[i,c] over
// the rows of chunk blockIdx.y. A block is 32 channels (threadIdx.x, so loads of one row are
// contiguous) by 32 row stripes (threadIdx.y); the 32 stripe sums of each channel are added in
// shared memory and written to partial_w/partial_b[chunk][c].
template <typename F>
__global__ void layernorm_backward_params_kernel(float* partial_w, float* partial_b, const F* dout, const F* inp,
                                                 const float* mean, const float* rstd, int N, int C, int chunk_rows) {
  __shared__ float sw[32][33], sb[32][33];  // +1 column: no shared-memory bank conflicts
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int first = blockIdx.y * chunk_rows, last = min(N, first + chunk_rows);
  float acc_w = 0.0f, acc_b = 0.0f;
  if (c < C) {
    for (int i = first + threadIdx.y; i < last; i += 32) {
      const std::size_t idx = static_cast<std::size_t>(i) * C + c;
      const float d = to_float(dout[idx]);
      const float xhat = (to_float(inp[idx]) - mean[i]) * rstd[i];
      acc_w += xhat * d;
      acc_b += d;
    }
  }
  sw[threadIdx.y][threadIdx.x] = acc_w;
  sb[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0.0f, tb = 0.0f;
    for (int y = 0; y < 32; ++y) {
      tw += sw[y][threadIdx.x];
      tb += sb[y][threadIdx.x];
    }
    partial_w[static_cast<std::size_t>(blockIdx.y) * C + c] = tw;
    partial_b[static_cast<std::size_t>(blockIdx.y) * C + c] = tb;
  }
}

// dweight[c] += the chunks' partial sums, added in chunk order.
template <typename F>
__global__ void layernorm_backward_params_total_kernel(F* dweight, F* dbias, const float* partial_w,
                                                       const float* partial_b, int C, int chunks) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float tw = 0.0f, tb = 0.0f;
  for (int k = 0; k < chunks; ++k) {
    tw += partial_w[static_cast<std::size_t>(k) * C + c];
    tb += partial_b[static_cast<std::size_t>(k) * C + c];
  }
  dweight[c] = from_float<F>(to_float(dweight[c]) + tw);
  dbias[c] = from_float<F>(to_float(dbias[c]) + tb);
}

}  // namespace

template <typename F>
void layernorm_forward(F* out, float* mean, float* rstd, const F* inp, const F* weight, const F* bias, int N, int C,
                       cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  layernorm_forward_kernel<<<blocks, kRowsPerBlock * 32, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, float* scratch, const F* dout, const F* inp, const F* weight,
                        const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const unsigned row_blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  layernorm_backward_input_kernel<<<row_blocks, kRowsPerBlock * 32, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N,
                                                                                 C);
  SCALELAB_CUDA_LAUNCH_CHECK();
  // Chunks of at least 32 rows (one per row stripe of a block), at most kLayerNormParamChunks.
  const int chunk_rows = std::max(32, (N + kLayerNormParamChunks - 1) / kLayerNormParamChunks);
  const int chunks = (N + chunk_rows - 1) / chunk_rows;
  float* partial_w = scratch;
  float* partial_b = scratch + static_cast<std::size_t>(kLayerNormParamChunks) * C;
  const dim3 grid((C + 31) / 32, chunks);
  layernorm_backward_params_kernel<<<grid, dim3(32, 32), 0, stream>>>(partial_w, partial_b, dout, inp, mean, rstd, N, C,
                                                                      chunk_rows);
  SCALELAB_CUDA_LAUNCH_CHECK();
  layernorm_backward_params_total_kernel<<<(C + 255) / 256, 256, 0, stream>>>(dweight, dbias, partial_w, partial_b, C,
                                                                              chunks);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

#define SCALELAB_INSTANTIATE(F)                                                                                     \
  template void layernorm_forward<F>(F*, float*, float*, const F*, const F*, const F*, int, int, cudaStream_t);     \
  template void layernorm_backward<F>(F*, F*, F*, float*, const F*, const F*, const F*, const float*, const float*, \
                                      int, int, cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
