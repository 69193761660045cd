// Token + position embedding: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
#pragma once
namespace scalelab {
// out (B,T,C); tokens (B,T); wte (V,C); wpe (maxT,C)
template <typename F>
void encoder_forward(F* out, const int* tokens, const F* wte, const F* wpe, int B, int T, int C);
// dwte (V,C) +=, dwpe (maxT,C) +=; dout (B,T,C)
template <typename F>
void encoder_backward(F* dwte, F* dwpe, const F* dout, const int* tokens, int B, int T, int C);
}  // namespace scalelab
