// Fused softmax + cross-entropy on the GPU; twin of model/layers/crossentropy.hpp.
// probs = softmax(logits), loss[i] = -log probs[i, target[i]], dlogits = (probs - onehot) * dloss.
// F (logits, probs, dlogits): float, bf16, fp16; the per-row losses are fp32.
#pragma once

#include <cuda_runtime_api.h>

namespace scalelab::cuda {
// probs (N,V) = softmax of logits (may alias logits: computed in place); losses (N) fp32;
// targets (N) on the device, each in [0, V) (the caller validates them: a kernel cannot throw).
// The rows of logits and probs are ld >= V elements apart; only the first V columns of a row are
// read or written, so whatever the padding holds (the LM head's, kernels/model/gpu_gpt.hpp)
// changes nothing. Unlike the CPU twin it returns nothing: the mean would need a device-to-host
// copy and a synchronisation. mean_loss() below computes it on the device.
template <typename F>
void crossentropy_forward(F* probs, float* losses, const F* logits, const int* targets, int N, int V, int ld,
                          cudaStream_t stream);
// dlogits (N,V) = (written; may alias probs); dloss as in the CPU twin (1/N for the mean loss).
// Rows ld >= V apart in both; only the first V columns are read or written.
template <typename F>
void crossentropy_backward(F* dlogits, const F* probs, const int* targets, float dloss, int N, int V, int ld,
                           cudaStream_t stream);

// The pair without probabilities, which the GPU model runs (one read and one write of the
// (N,V) logits fewer a step). crossentropy_loss: losses (N) as crossentropy_forward computes
// them, from logits read once, nothing else written. crossentropy_backward_logits: dlogits (N,V)
// = (softmax(logits) - onehot) * dloss, with the softmax recomputed from the logits and the
// losses crossentropy_loss returned for them (each row's log-sum-exp is its loss plus its target's
// logit); dlogits may alias logits. Rows ld >= V apart; only the first V columns are read or
// written.
template <typename F>
void crossentropy_loss(float* losses, const F* logits, const int* targets, int N, int V, int ld, cudaStream_t stream);
template <typename F>
void crossentropy_backward_logits(F* dlogits, const F* logits, const float* losses, const int* targets, float dloss,
                                  int N, int V, int ld, cudaStream_t stream);

// The same with contiguous rows (ld = V).
template <typename F>
void crossentropy_forward(F* probs, float* losses, const F* logits, const int* targets, int N, int V,
                          cudaStream_t stream) {
  crossentropy_forward(probs, losses, logits, targets, N, V, V, stream);
}
template <typename F>
void crossentropy_backward(F* dlogits, const F* probs, const int* targets, float dloss, int N, int V,
                           cudaStream_t stream) {
  crossentropy_backward(dlogits, probs, targets, dloss, N, V, V, stream);
}
// *mean = (1/N) sum_i losses[i], summed in double in a fixed order (one block): the value the
// CPU twin returns. mean points to device memory.
void mean_loss(float* mean, const float* losses, int N, cudaStream_t stream);
}  // namespace scalelab::cuda
