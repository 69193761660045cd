// Token + position embedding on the GPU; twin of model/layers/encoder.hpp (same arguments, plus
// the stream). out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]. F: float, bf16, fp16 (T is the sequence length).
#pragma once

#include <cuda_runtime_api.h>

namespace scalelab::cuda {
// out (B,F,C); tokens (B,F) on the device; wte (V,C); wpe (maxT,C)
template <typename F>
void encoder_forward(F* out, const int* tokens, const F* wte, const F* wpe, int B, int T, int C, cudaStream_t stream);
// dwte (V,C) +=, dwpe (maxT,C) +=; dout (B,F,C).
// dwpe is summed over the batch in a fixed order (deterministic). dwte rows are scattered to by
// every position holding that token, with atomicAdd: the order of those additions (and so the
// last bits of dwte) can change from run to run. In bf16/fp16 each addition rounds.
template <typename F>
void encoder_backward(F* dwte, F* dwpe, const F* dout, const int* tokens, int B, int T, int C, cudaStream_t stream);
}  // namespace scalelab::cuda
