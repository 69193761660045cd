// Fused softmax + cross-entropy over the vocabulary: probs = softmax(logits),
// loss[i] = -log(probs[i, target[i]]). Fusing them keeps the gradient simple and stable:
// dlogits = (probs - onehot(target)) * dloss.
#pragma once
namespace scalelab {
// probs (N,V) = softmax of logits (may alias logits: computed in place); losses (N);
// targets (N). Returns the mean loss over the N rows.
template <typename F>
F crossentropy_forward(F* probs, F* losses, const F* logits, const int* targets, int N, int V);
// dlogits (N,V) = (written); dloss is d(total objective)/d(loss[i]), the same for every row
// (1/N for the mean loss; times 1/k under gradient accumulation).
template <typename F>
void crossentropy_backward(F* dlogits, const F* probs, const int* targets, F dloss, int N, int V);
}  // namespace scalelab
