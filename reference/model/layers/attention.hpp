// Causal multi-head self-attention (the part between the qkv and output projections):
//   per batch b and head h:  att = softmax(mask(q k^T / sqrt(hs))),  out = att v
// q, k, v are the three C-wide slices of qkv; head h uses columns [h*hs, (h+1)*hs) of each.
#pragma once
namespace scalelab {
// out (B,T,C); att (B,NH,T,T) saved softmax probabilities (zero above the diagonal);
// qkv (B,T,3C).
template <typename F>
void attention_forward(F* out, F* att, const F* qkv, int B, int T, int C, int NH);
// dqkv (B,T,3C) = (written); scratch (T,T) workspace; dout (B,T,C); qkv (B,T,3C); att (B,NH,T,T).
template <typename F>
void attention_backward(F* dqkv, F* scratch, const F* dout, const F* qkv, const F* att, int B, int T, int C, int NH);
}  // namespace scalelab
