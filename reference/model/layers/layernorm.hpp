// LayerNorm over the last dimension: y = (x - mean) * rstd * weight + bias,
// rstd = 1 / sqrt(var + 1e-5) with the biased variance (as PyTorch).
#pragma once
namespace scalelab {
// out (N,C); mean, rstd (N) saved for backward; inp (N,C); weight, bias (C). N = B*T rows.
template <typename F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight, const F* bias, int N, int C);
// dinp (N,C) += (the input is always a residual stream that also gets the skip gradient);
// dweight, dbias (C) +=; dout (N,C).
template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, const F* mean,
                        const F* rstd, int N, int C);
}  // namespace scalelab
