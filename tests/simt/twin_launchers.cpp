// The GPU launchers of kernels/layers, kernels/optim and kernels/precision, each replaced by its
// CPU twin (reference/), for the GPU model's host code on the CPU (test_gpu_model_host): with the
// emulated runtime (runtime_emulation.cpp), "device" pointers are host memory, so each launcher
// here reads its inputs widened to fp32, runs the twin, and stores its outputs rounded once to F,
// as the GPU's kernels do. The kernels themselves are not what this checks (their tests are
// test_gpu_kernels on a GPU and the emulated kernel tests); what it checks is the model's use of
// them: which buffer goes where, row strides, what is accumulated (+=) and what is written.
//
// Each function keeps its header's contract (kernels/layers/*.hpp, ...): written or added to, rows
// ld apart, the padding of a row never touched. The cross-entropy pair without probabilities is
// written from its contract (the softmax from the logits and the loss), not from the twin's
// probabilities, so that the loss the model hands it is the one used.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/core/blas.hpp"
#include "kernels/core/dtype.hpp"
#include "kernels/layers/attention.hpp"
#include "kernels/layers/attention_flash.hpp"
#include "kernels/layers/crossentropy.hpp"
#include "kernels/layers/encoder.hpp"
#include "kernels/layers/layernorm.hpp"
#include "kernels/layers/matmul.hpp"
#include "kernels/layers/residual.hpp"
#include "kernels/layers/tensor_parallel.hpp"
#include "kernels/optim/adamw.hpp"
#include "kernels/optim/grad_ops.hpp"
#include "kernels/precision/cast.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/attention_flash.hpp"
#include "model/layers/crossentropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/matmul.hpp"

namespace scalelab::cuda {

namespace {

template <typename F>
float to_f(F x) {
  if constexpr (std::is_same_v<F, float>)
    return x;
  else if constexpr (std::is_same_v<F, bf16>)
    return __bfloat162float(x);
  else
    return __half2float(x);
}
template <typename F>
F from_f(float x) {  // round to nearest even, as the kernels store
  if constexpr (std::is_same_v<F, float>)
    return x;
  else if constexpr (std::is_same_v<F, bf16>)
    return __float2bfloat16(x);
  else
    return __float2half(x);
}

// n elements of a (rows, cols) matrix whose rows are ld apart, widened: the contiguous (rows, cols).
template <typename F>
std::vector<float> wide(const F* p, std::size_t rows, std::size_t cols = 1, std::size_t ld = 0) {
  if (ld == 0) ld = cols;
  std::vector<float> x(rows * cols);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) x[r * cols + c] = to_f(p[r * ld + c]);
  return x;
}
// Stores the contiguous (rows, cols) x into p's rows ld apart, rounded to F.
template <typename F>
void narrow(F* p, const std::vector<float>& x, std::size_t cols = 0, std::size_t ld = 0) {
  if (cols == 0) cols = x.size();
  if (ld == 0) ld = cols;
  const std::size_t rows = x.size() / cols;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) p[r * ld + c] = from_f<F>(x[r * cols + c]);
}
std::size_t sz(int a, int b = 1, int c = 1) {
  return static_cast<std::size_t>(a) * static_cast<std::size_t>(b) * static_cast<std::size_t>(c);
}

}  // namespace

// ---- layers ----

template <typename F>
void encoder_forward(F* out, const int* tokens, const F* wte, const F* wpe, int B, int T, int C, cudaStream_t) {
  for (int i = 0; i < B * T; ++i)
    for (int c = 0; c < C; ++c)
      out[sz(i, C) + c] = from_f<F>(to_f(wte[sz(tokens[i], C) + c]) + to_f(wpe[sz(i % T, C) + c]));
}
template <typename F>
void encoder_backward(F* dwte, F* dwpe, const F* dout, const int* tokens, int B, int T, int C, cudaStream_t) {
  for (int i = 0; i < B * T; ++i)
    for (int c = 0; c < C; ++c) {
      const float g = to_f(dout[sz(i, C) + c]);
      F& w = dwte[sz(tokens[i], C) + c];
      F& p = dwpe[sz(i % T, C) + c];
      w = from_f<F>(to_f(w) + g);
      p = from_f<F>(to_f(p) + g);
    }
}

template <typename F>
void layernorm_forward(F* out, float* mean, float* rstd, const F* inp, const F* weight, const F* bias, int N, int C,
                       cudaStream_t) {
  std::vector<float> o(sz(N, C));
  scalelab::layernorm_forward(o.data(), mean, rstd, wide(inp, sz(N, C)).data(), wide(weight, C).data(),
                              wide(bias, C).data(), N, C);
  narrow(out, o);
}
template <typename F>
void residual_layernorm_forward(F* residual, F* out, float* mean, float* rstd, const F* a, const F* b, const F* weight,
                                const F* bias, int N, int C, cudaStream_t stream) {
  std::vector<float> x = wide(a, sz(N, C)), y = wide(b, sz(N, C));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  narrow(residual, x);  // rounded, then normalised from the rounded values
  layernorm_forward(out, mean, rstd, residual, weight, bias, N, C, stream);
}
template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, float*, const F* dout, const F* inp, const F* weight,
                        const float* mean, const float* rstd, int N, int C, cudaStream_t, LayerNormBackwardKernel) {
  std::vector<float> dx = wide(dinp, sz(N, C)), dw = wide(dweight, C), db = wide(dbias, C);
  scalelab::layernorm_backward(dx.data(), dw.data(), db.data(), wide(dout, sz(N, C)).data(), wide(inp, sz(N, C)).data(),
                               wide(weight, C).data(), mean, rstd, N, C);
  narrow(dinp, dx);
  narrow(dweight, dw);
  narrow(dbias, db);
}

template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC, int ld_out,
                    const Blas&) {
  std::vector<float> o(sz(N, OC));
  const std::vector<float> b = bias ? wide(bias, OC) : std::vector<float>{};
  scalelab::matmul_forward(o.data(), wide(inp, sz(N, C)).data(), wide(weight, sz(OC, C)).data(),
                           bias ? b.data() : nullptr, N, C, OC);
  narrow(out, o, OC, ld_out);
}
// dinp written; dweight and dbias (unless nullptr) added to; dout's rows ld_out apart.
template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, int N, int C, int OC,
                     int ld_out, const Blas&) {
  std::vector<float> dx(sz(N, C)), dw = wide(dweight, sz(OC, C));
  std::vector<float> db = dbias ? wide(dbias, OC) : std::vector<float>{};
  scalelab::matmul_backward(dx.data(), dw.data(), dbias ? db.data() : nullptr, wide(dout, N, OC, ld_out).data(),
                            wide(inp, sz(N, C)).data(), wide(weight, sz(OC, C)).data(), N, C, OC);
  narrow(dinp, dx);
  narrow(dweight, dw);
  if (dbias) narrow(dbias, db);
}
template <typename F>
void matmul_backward_bias(F* dbias, const F* dout, int N, int OC, const Blas&) {
  std::vector<float> db = wide(dbias, OC);
  const std::vector<float> d = wide(dout, sz(N, OC));
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < OC; ++j) db[j] += d[sz(i, OC) + j];
  narrow(dbias, db);
}
// pre = inp @ weight^T + bias (stored in F), out = gelu(pre).
template <typename F>
void matmul_gelu_forward(F* out, F* pre, const F* inp, const F* weight, const F* bias, int N, int C, int OC,
                         const Blas& blas) {
  matmul_forward(pre, inp, weight, bias, N, C, OC, OC, blas);
  std::vector<float> o(sz(N, OC));
  scalelab::gelu_forward(o.data(), wide(pre, sz(N, OC)).data(), o.size());
  narrow(out, o);
}
// dpre = (dout @ weight) * gelu'(pre), as the unfused path runs it (matmul_backward into dpre, then
// the GELU's backward over it); dweight, dbias += as matmul_backward.
template <typename F>
void matmul_gelu_backward(F* dpre, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, const F* pre,
                          int N, int C, int OC, const Blas& blas) {
  matmul_backward(dpre, dweight, dbias, dout, inp, weight, N, C, OC, OC, blas);
  std::vector<float> d(sz(N, C));
  scalelab::gelu_backward(d.data(), wide(dpre, sz(N, C)).data(), wide(pre, sz(N, C)).data(), d.size());
  narrow(dpre, d);
}

template <typename F>
void attention_forward(F* out, F* att, const F* qkv, int B, int T, int C, int NH, const Blas&) {
  std::vector<float> o(sz(B, T, C)), a(sz(B, NH) * sz(T, T));
  scalelab::attention_forward(o.data(), a.data(), wide(qkv, sz(B, T, 3 * C)).data(), B, T, C, NH);
  narrow(out, o);
  narrow(att, a);
}
template <typename F>
void attention_backward(F* dqkv, F*, const F* dout, const F* qkv, const F* att, int B, int T, int C, int NH,
                        const Blas&) {
  std::vector<float> d(sz(B, T, 3 * C)), scratch(sz(T, T));
  scalelab::attention_backward(d.data(), scratch.data(), wide(dout, sz(B, T, C)).data(),
                               wide(qkv, sz(B, T, 3 * C)).data(), wide(att, sz(B, NH) * sz(T, T)).data(), B, T, C, NH);
  narrow(dqkv, d);
}
template <typename F>
void attention_flash_forward(F* out, float* lse, const F* qkv, int B, int T, int C, int NH, cudaStream_t) {
  std::vector<float> o(sz(B, T, C)), scratch(scalelab::attention_flash_scratch_elems(T));
  scalelab::attention_flash_forward(o.data(), lse, scratch.data(), wide(qkv, sz(B, T, 3 * C)).data(), B, T, C, NH);
  narrow(out, o);
}
template <typename F>
void attention_flash_backward(F* dqkv, const F* dout, const F* qkv, const F* out, const float* lse, int B, int T, int C,
                              int NH, cudaStream_t) {
  std::vector<float> d(sz(B, T, 3 * C)), scratch(scalelab::attention_flash_scratch_elems(T));
  scalelab::attention_flash_backward(d.data(), scratch.data(), wide(dout, sz(B, T, C)).data(),
                                     wide(qkv, sz(B, T, 3 * C)).data(), wide(out, sz(B, T, C)).data(), lse, B, T, C,
                                     NH);
  narrow(dqkv, d);
}

template <typename F>
void residual_forward(F* out, const F* a, const F* b, std::size_t N, cudaStream_t) {
  for (std::size_t i = 0; i < N; ++i) out[i] = from_f<F>(to_f(a[i]) + to_f(b[i]));
}

template <typename F>
void crossentropy_loss(float* losses, const F* logits, const int* targets, int N, int V, int ld, cudaStream_t) {
  std::vector<float> probs(sz(N, V));
  scalelab::crossentropy_forward(probs.data(), losses, wide(logits, N, V, ld).data(), targets, N, V);
}
// From the contract: p = exp(z - lse), lse = loss + z[target]; dlogits = (p - onehot) * dloss.
template <typename F>
void crossentropy_backward_logits(F* dlogits, const F* logits, const float* losses, const int* targets, float dloss,
                                  int N, int V, int ld, cudaStream_t) {
  const std::vector<float> z = wide(logits, N, V, ld);
  std::vector<float> d(sz(N, V));
  for (int i = 0; i < N; ++i) {
    const float lse = losses[i] + z[sz(i, V) + targets[i]];
    for (int j = 0; j < V; ++j)
      d[sz(i, V) + j] = std::exp(z[sz(i, V) + j] - lse) * dloss - (j == targets[i] ? dloss : 0);
  }
  narrow(dlogits, d, V, ld);
}
// dlogits = (probs - onehot) * dloss; a target of -1 (the tensor-parallel head's: another
// rank's token) matches no column.
template <typename F>
void crossentropy_backward(F* dlogits, const F* probs, const int* targets, float dloss, int N, int V, int ld,
                           cudaStream_t) {
  std::vector<float> d = wide(probs, N, V, ld);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < V; ++j) d[sz(i, V) + j] = d[sz(i, V) + j] * dloss - (j == targets[i] ? dloss : 0.0f);
  narrow(dlogits, d, V, ld);
}
void mean_loss(float* mean, const float* losses, int N, cudaStream_t) {
  double s = 0;
  for (int i = 0; i < N; ++i) s += losses[i];
  *mean = static_cast<float>(s / N);
}

// ---- stage 06: the tensor-parallel kernels (kernels/layers/tensor_parallel.hpp) ----

template <typename F>
void vocab_embedding_forward(F* out, const int* local_tokens, const F* wte_local, int N, int C, cudaStream_t) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) out[sz(n, C) + c] = local_tokens[n] >= 0 ? wte_local[sz(local_tokens[n], C) + c] : F{};
}
template <typename F>
void add_position_embedding(F* out, const F* wpe, int first_row, int rows, int T, int C, cudaStream_t) {
  for (int i = 0; i < rows; ++i)
    for (int c = 0; c < C; ++c) {
      F& o = out[sz(i, C) + c];
      o = from_f<F>(to_f(o) + to_f(wpe[sz((first_row + i) % T, C) + c]));
    }
}
template <typename F>
void vocab_embedding_backward(F* dwte_local, const F* dout, const int* local_tokens, int N, int C, cudaStream_t) {
  for (int n = 0; n < N; ++n)
    if (local_tokens[n] >= 0)
      for (int c = 0; c < C; ++c) {
        F& w = dwte_local[sz(local_tokens[n], C) + c];
        w = from_f<F>(to_f(w) + to_f(dout[sz(n, C) + c]));
      }
}
template <typename F>
void position_embedding_backward(F* dwpe, const F* dout, int first_row, int rows, int T, int C, cudaStream_t) {
  for (int i = 0; i < rows; ++i)
    for (int c = 0; c < C; ++c) {
      F& w = dwpe[sz((first_row + i) % T, C) + c];
      w = from_f<F>(to_f(w) + to_f(dout[sz(i, C) + c]));
    }
}
template <typename F>
void vocab_ce_row_max(float* row_max, const F* logits, int N, int V_real, int ld, cudaStream_t) {
  for (int i = 0; i < N; ++i) {
    float m = -INFINITY;
    for (int j = 0; j < V_real; ++j) m = std::max(m, to_f(logits[sz(i, ld) + j]));
    row_max[i] = m;
  }
}
template <typename F>
void vocab_ce_row_sums(float* sum_exp, float* target_logit, const F* logits, const float* row_max,
                       const int* local_targets, int N, int V_real, int ld, cudaStream_t) {
  for (int i = 0; i < N; ++i) {
    double s = 0;
    for (int j = 0; j < V_real; ++j) s += std::exp(to_f(logits[sz(i, ld) + j]) - row_max[i]);
    sum_exp[i] = static_cast<float>(s);
    target_logit[i] = local_targets[i] >= 0 ? to_f(logits[sz(i, ld) + local_targets[i]]) : 0.0f;
  }
}
template <typename F>
void vocab_ce_finish(F* probs, float* losses, const F* logits, const float* row_max, const float* sum_exp,
                     const float* target_logit, int N, int V_real, int ld, cudaStream_t) {
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < V_real; ++j)
      probs[sz(i, ld) + j] = from_f<F>(std::exp(to_f(logits[sz(i, ld) + j]) - row_max[i]) / sum_exp[i]);
    losses[i] = std::log(sum_exp[i]) - (target_logit[i] - row_max[i]);
  }
}
template <typename F>
void add_bias(F* y, const F* bias, int N, int C, cudaStream_t) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) y[sz(n, C) + c] = from_f<F>(to_f(y[sz(n, C) + c]) + to_f(bias[c]));
}

// ---- optimizer and precision ----

// The CPU's update_range, element by element, with the scalars the host computed.
void adamw_update(float* params, const float* grads, float* m, float* v, std::size_t count, const AdamWScalars& k,
                  cudaStream_t) {
  for (std::size_t i = 0; i < count; ++i) {
    const float g = grads[i];
    params[i] *= k.decay;
    m[i] = m[i] * k.beta1 + g * k.one_minus_beta1;
    v[i] = v[i] * k.beta2 + g * g * k.one_minus_beta2;
    const float denom = std::sqrt(v[i]) / k.bc2_sqrt + k.eps;
    params[i] -= k.step_size * (m[i] / denom);
  }
}
template <typename H>
void adamw_update_mixed(H* params, float* master, const H* grads, float* m, float* v, std::size_t count,
                        float grad_scale, const AdamWScalars& k, cudaStream_t stream) {
  std::vector<float> g = wide(grads, count);
  for (float& x : g) x *= grad_scale;
  adamw_update(master, g.data(), m, v, count, k, stream);
  for (std::size_t i = 0; i < count; ++i) params[i] = from_f<H>(master[i]);
}

template <typename F>
void scale_inplace(F* x, float factor, std::size_t N, cudaStream_t) {
  for (std::size_t i = 0; i < N; ++i) x[i] = from_f<F>(to_f(x[i]) * factor);
}
template <typename F>
void sum_squares(double* out, double*, const F* x, std::size_t N, cudaStream_t) {
  double s = 0;
  for (std::size_t i = 0; i < N; ++i) s += static_cast<double>(to_f(x[i])) * to_f(x[i]);
  *out = s;
}
template <typename To, typename From>
void cast(To* out, const From* in, std::size_t N, cudaStream_t) {
  for (std::size_t i = 0; i < N; ++i) out[i] = from_f<To>(to_f(in[i]));
}

#define SCALELAB_INSTANTIATE(F)                                                                                        \
  template void encoder_forward<F>(F*, const int*, const F*, const F*, int, int, int, cudaStream_t);                   \
  template void encoder_backward<F>(F*, F*, const F*, const int*, int, int, int, cudaStream_t);                        \
  template void layernorm_forward<F>(F*, float*, float*, const F*, const F*, const F*, int, int, cudaStream_t);        \
  template void residual_layernorm_forward<F>(F*, F*, float*, float*, const F*, const F*, const F*, const F*, int,     \
                                              int, cudaStream_t);                                                      \
  template void layernorm_backward<F>(F*, F*, F*, float*, const F*, const F*, const F*, const float*, const float*,    \
                                      int, int, cudaStream_t, LayerNormBackwardKernel);                                \
  template void matmul_forward<F>(F*, const F*, const F*, const F*, int, int, int, int, const Blas&);                  \
  template void matmul_backward<F>(F*, F*, F*, const F*, const F*, const F*, int, int, int, int, const Blas&);         \
  template void matmul_backward_bias<F>(F*, const F*, int, int, const Blas&);                                          \
  template void matmul_gelu_forward<F>(F*, F*, const F*, const F*, const F*, int, int, int, const Blas&);              \
  template void matmul_gelu_backward<F>(F*, F*, F*, const F*, const F*, const F*, const F*, int, int, int,             \
                                        const Blas&);                                                                  \
  template void attention_forward<F>(F*, F*, const F*, int, int, int, int, const Blas&);                               \
  template void attention_backward<F>(F*, F*, const F*, const F*, const F*, int, int, int, int, const Blas&);          \
  template void attention_flash_forward<F>(F*, float*, const F*, int, int, int, int, cudaStream_t);                    \
  template void attention_flash_backward<F>(F*, const F*, const F*, const F*, const float*, int, int, int, int,        \
                                            cudaStream_t);                                                             \
  template void residual_forward<F>(F*, const F*, const F*, std::size_t, cudaStream_t);                                \
  template void crossentropy_loss<F>(float*, const F*, const int*, int, int, int, cudaStream_t);                       \
  template void crossentropy_backward_logits<F>(F*, const F*, const float*, const int*, float, int, int, int,          \
                                                cudaStream_t);                                                         \
  template void crossentropy_backward<F>(F*, const F*, const int*, float, int, int, int, cudaStream_t);                \
  template void vocab_embedding_forward<F>(F*, const int*, const F*, int, int, cudaStream_t);                          \
  template void add_position_embedding<F>(F*, const F*, int, int, int, int, cudaStream_t);                             \
  template void vocab_embedding_backward<F>(F*, const F*, const int*, int, int, cudaStream_t);                         \
  template void position_embedding_backward<F>(F*, const F*, int, int, int, int, cudaStream_t);                        \
  template void vocab_ce_row_max<F>(float*, const F*, int, int, int, cudaStream_t);                                    \
  template void vocab_ce_row_sums<F>(float*, float*, const F*, const float*, const int*, int, int, int, cudaStream_t); \
  template void vocab_ce_finish<F>(F*, float*, const F*, const float*, const float*, const float*, int, int, int,      \
                                   cudaStream_t);                                                                      \
  template void add_bias<F>(F*, const F*, int, int, cudaStream_t);                                                     \
  template void scale_inplace<F>(F*, float, std::size_t, cudaStream_t);                                                \
  template void sum_squares<F>(double*, double*, const F*, std::size_t, cudaStream_t);
SCALELAB_INSTANTIATE(float)
SCALELAB_INSTANTIATE(bf16)
SCALELAB_INSTANTIATE(fp16)
#undef SCALELAB_INSTANTIATE
template void adamw_update_mixed<bf16>(bf16*, float*, const bf16*, float*, float*, std::size_t, float,
                                       const AdamWScalars&, cudaStream_t);
template void adamw_update_mixed<fp16>(fp16*, float*, const fp16*, float*, float*, std::size_t, float,
                                       const AdamWScalars&, cudaStream_t);
template void cast<bf16, float>(bf16*, const float*, std::size_t, cudaStream_t);
template void cast<fp16, float>(fp16*, const float*, std::size_t, cudaStream_t);
template void cast<float, bf16>(float*, const bf16*, std::size_t, cudaStream_t);
template void cast<float, fp16>(float*, const fp16*, std::size_t, cudaStream_t);
template void cast<float, float>(float*, const float*, std::size_t, cudaStream_t);

}  // namespace scalelab::cuda
