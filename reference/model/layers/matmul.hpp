// A linear layer as nn.Linear stores it: out = inp @ weight^T + bias, weight (OC, C).
#pragma once
namespace scalelab {
// out (N,OC); inp (N,C); weight (OC,C); bias (OC) or nullptr (the tied LM head has none).
template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC);
// dinp (N,C) = (written); dweight (OC,C) +=; dbias (OC) += unless nullptr; dout (N,OC).
template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, int N, int C, int OC);
}  // namespace scalelab
