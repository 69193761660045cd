// Linear layer: three cuBLAS products (the same three as the CPU twin; each split in two column
// parts for the padded LM head, below) plus two small kernels, the bias broadcast (forward) and
// the bias gradient's column sum (backward, in bias_grad_kernels.cuh). In bf16/fp16 the forward's bias, and the MLP's
// GELU on either side of it, go into the product's own epilogue instead (cuBLASLt, blas.hpp).
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/bias_grad_kernels.cuh"
#include "kernels/layers/gelu.hpp"
#include "kernels/layers/matmul.hpp"

namespace scalelab::cuda {

namespace {

// out[i,j] = bias[j] for every row i (rows ld apart); n = N * OC.
template <typename F>
__global__ void broadcast_bias_kernel(F* out, const F* bias, int OC, int ld, std::size_t n) {
  for (std::size_t idx = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; idx < n;
       idx += std::size_t(gridDim.x) * blockDim.x)
    out[idx / OC * ld + idx % OC] = bias[idx % OC];
}

// cuBLAS's half-precision products run several times slower when the output has a number of
// columns that is not a multiple of 8, aligned rows or not: measured on an H100 for the LM head
// (N = 8192, C = 768, bf16), OC = 50257 ran at 12% of the bf16 GEMM ceiling forward and 17%
// backward, OC = 50256 at 90% and 99%. So where out's rows are aligned (the LM head's padded
// rows, ld_out a multiple of 8) the product is split into the aligned bulk of columns and the
// fewer than 8 left over, which cost next to nothing. Contiguous outputs are never split.
constexpr int kColumnAlign = 8;

struct ColumnPart {
  int begin, count;
};
std::vector<ColumnPart> column_parts(int OC, int ld_out) {
  const int bulk = OC / kColumnAlign * kColumnAlign;
  if (ld_out % kColumnAlign != 0 || bulk == 0 || bulk == OC) return {{0, OC}};
  return {{0, bulk}, {bulk, OC - bulk}};
}

// gemm_epilogue where it may run; false where it does not: fp32 (kept to the unfused kernels,
// which match the CPU to fp32 rounding) or a shape cuBLASLt does not fuse.
template <typename F>
bool fused_gemm(const Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, const F* a, int lda, const F* b,
                int ldb, F* c, int ldc, const EpilogueArgs<F>& epilogue) {
  if constexpr (std::is_same_v<F, float>)
    return false;
  else
    return gemm_epilogue<F>(blas, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, epilogue);
}
// The forward product out (N,OC) = inp @ weight^T with an epilogue, contiguous rows.
template <typename F>
bool fused_forward(F* out, const F* inp, const F* weight, int N, int C, int OC, const EpilogueArgs<F>& epilogue,
                   const Blas& blas) {
  return fused_gemm<F>(blas, false, true, N, OC, C, inp, C, weight, C, out, OC, epilogue);
}

// dbias (OC) += the column sums of dout (N,OC), rows ld apart (bias_grad_kernels.cuh's two passes).
template <typename F, int kPack>
void bias_backward_with(F* dbias, const F* dout, int N, int OC, int ld, const Blas& blas) {
  const bias_grad::Launch l = bias_grad::launch_shape<kPack>(N, OC, blas.workspace_bytes());
  float* partials = static_cast<float*>(blas.workspace());
  bias_grad::partials_kernel<F, kPack>
      <<<dim3(l.strips, l.chunks), dim3(32, bias_grad::kRowLanes), 0, blas.stream()>>>(partials, dout, N, OC, ld,
                                                                                       l.rows_per_chunk);
  SCALELAB_CUDA_LAUNCH_CHECK();
  bias_grad::sum_kernel<<<(OC + 255) / 256, 256, 0, blas.stream()>>>(dbias, partials, l.chunks, OC);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void bias_backward(F* dbias, const F* dout, int N, int OC, int ld, const Blas& blas) {
  if (N <= 0 || OC <= 0) return;
  // 16-byte loads where every row's columns start on a 16-byte boundary.
  constexpr int kPack = Pack16<F>::kSize;
  if (OC % kPack == 0 && ld % kPack == 0 && aligned16(dout))
    bias_backward_with<F, kPack>(dbias, dout, N, OC, ld, blas);
  else
    bias_backward_with<F, 1>(dbias, dout, N, OC, ld, blas);
}

// The parameter gradients of a linear layer: dweight (OC,C) += dout^T @ inp by the column parts of
// dout (rows of weight), and dbias += the column sums of dout unless dbias is nullptr.
template <typename F>
void parameter_grads(F* dweight, F* dbias, const F* dout, const F* inp, int N, int C, int OC, int ld_out,
                     const Blas& blas) {
  for (const ColumnPart& p : column_parts(OC, ld_out)) {
    const std::size_t row = static_cast<std::size_t>(p.begin) * C;
    gemm<F>(blas, true, false, p.count, C, N, 1.0f, dout + p.begin, ld_out, inp, C, 1.0f, dweight + row, C);
  }
  if (dbias) bias_backward(dbias, dout, N, OC, ld_out, blas);
}

}  // namespace

template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC, int ld_out,
                    const Blas& blas) {
  SCALELAB_CHECK(ld_out >= OC, "matmul_forward: output rows ", ld_out, " apart, fewer than its ", OC, " columns");
  if (N <= 0 || OC <= 0) return;
  if (bias && ld_out == OC && fused_forward(out, inp, weight, N, C, OC, {.kind = Epilogue::kBias, .bias = bias}, blas))
    return;
  float beta = 0.0f;
  if (bias) {
    const std::size_t n = static_cast<std::size_t>(N) * OC;
    broadcast_bias_kernel<<<blocks_for(n), kThreads, 0, blas.stream()>>>(out, bias, OC, ld_out, n);
    SCALELAB_CUDA_LAUNCH_CHECK();
    beta = 1.0f;
  }
  // out (N,OC) = inp (N,C) @ weight^T (C,OC) [+ out], by column parts: out[:, j] uses weight row j
  for (const ColumnPart& p : column_parts(OC, ld_out))
    gemm<F>(blas, false, true, N, p.count, C, 1.0f, inp, C, weight + static_cast<std::size_t>(p.begin) * C, C, beta,
            out + p.begin, ld_out);
}

template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, int N, int C, int OC,
                     int ld_out, const Blas& blas) {
  SCALELAB_CHECK(ld_out >= OC, "matmul_backward: dout rows ", ld_out, " apart, fewer than its ", OC, " columns");
  if (N <= 0) return;
  // By the column parts of dout (rows of weight): dinp (N,C) = sum over parts of dout[:, part] @
  // weight[part, :] (the first written, the rest added); dweight[part, :] += dout[:, part]^T @ inp.
  float beta = 0.0f;
  for (const ColumnPart& p : column_parts(OC, ld_out)) {
    const std::size_t row = static_cast<std::size_t>(p.begin) * C;
    gemm<F>(blas, false, false, N, C, p.count, 1.0f, dout + p.begin, ld_out, weight + row, C, beta, dinp, C);
    beta = 1.0f;
  }
  parameter_grads(dweight, dbias, dout, inp, N, C, OC, ld_out, blas);
}

template <typename F>
void matmul_backward_bias(F* dbias, const F* dout, int N, int OC, const Blas& blas) {
  bias_backward(dbias, dout, N, OC, OC, blas);
}

template <typename F>
void matmul_gelu_forward(F* out, F* pre, const F* inp, const F* weight, const F* bias, int N, int C, int OC,
                         const Blas& blas) {
  if (N <= 0 || OC <= 0) return;
  const EpilogueArgs<F> gelu{.kind = Epilogue::kGeluBias, .bias = bias, .aux_out = pre, .ld_aux = OC};
  if (bias && fused_forward(out, inp, weight, N, C, OC, gelu, blas)) return;
  matmul_forward(pre, inp, weight, bias, N, C, OC, blas);
  gelu_forward(out, pre, static_cast<std::size_t>(N) * OC, blas.stream());
}

template <typename F>
void matmul_gelu_backward(F* dpre, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, const F* pre,
                          int N, int C, int OC, const Blas& blas) {
  if (N <= 0) return;
  // dpre (N,C) = (dout (N,OC) @ weight (OC,C)) * gelu'(pre) in one product, then the parameter
  // gradients as matmul_backward takes them.
  const EpilogueArgs<F> dgelu{.kind = Epilogue::kDGelu, .aux_in = pre, .ld_aux = C};
  if (fused_gemm<F>(blas, false, false, N, C, OC, dout, OC, weight, C, dpre, C, dgelu)) {
    parameter_grads(dweight, dbias, dout, inp, N, C, OC, OC, blas);
    return;
  }
  matmul_backward(dpre, dweight, dbias, dout, inp, weight, N, C, OC, blas);
  gelu_backward(dpre, dpre, pre, static_cast<std::size_t>(N) * C, blas.stream());
}

#define SCALELAB_INSTANTIATE(F)                                                                                \
  template void matmul_forward<F>(F*, const F*, const F*, const F*, int, int, int, int, const Blas&);          \
  template void matmul_backward<F>(F*, F*, F*, const F*, const F*, const F*, int, int, int, int, const Blas&); \
  template void matmul_backward_bias<F>(F*, const F*, int, int, const Blas&);                                  \
  template void matmul_gelu_forward<F>(F*, F*, const F*, const F*, const F*, int, int, int, const Blas&);      \
  template void matmul_gelu_backward<F>(F*, F*, F*, const F*, const F*, const F*, const F*, int, int, int, const Blas&);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
