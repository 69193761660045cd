// Stage 06: the vocabulary split (Megatron-LM's VocabParallelEmbedding and
// vocab_parallel_cross_entropy) on the tied token embedding. Rank r holds rows
// [begin, begin + Vl) of wte, the vocabulary padded to t * Vl rows (dist/tp_layout.hpp).
//
// Embedding: each rank looks up the tokens in its range and writes zeros for the rest; the sum
// over ranks (g forward: an all-reduce, or a reduce-scatter under sequence parallelism) is the
// whole lookup, exactly, since all but one addend are zero. Then the replicated wpe is added.
//
// Cross-entropy on the LM head's logits (N, Vl), this rank's columns of (N, V):
//     loss_i = log sum_j exp(z_ij - m_i) + m_i - z_i,target,   m_i = max_j z_ij
// needs three numbers per row from every rank's columns: the maximum (all-reduce MAX), the
// sum of exponentials and the target's logit (all-reduce SUM; the target lives on one rank,
// the others add 0). Backward is local: d z_ij = (softmax_ij - [j == target_i]) * dloss, each
// rank on its own columns, because the reductions already put the whole row's softmax
// denominator on every rank. Padded columns (ids >= V) are left out of the max and the sum
// and get zero probability and zero gradient, so padding never changes the loss.
#pragma once

#include "dist/tp_layout.hpp"
#include "dist/tp_operators.hpp"

namespace scalelab {

// out (local rows, C) = wte[tokens] + wpe[position], for this rank's token rows; partial (N, C)
// scratch; tokens (B, T); wte_local (Vl, C); wpe (maxT, C).
void vocab_parallel_embedding_forward(TpGroup& tp, float* out, float* partial, const int* tokens,
                                      const float* wte_local, const float* wpe, const VocabRange& vocab, int B, int T,
                                      int C);
// dwte_local (Vl, C) += rows of this rank's tokens; dwpe (maxT, C) += this rank's token rows
// (a partial sum under sequence parallelism); dout (local rows, C); dout_full (N, C) scratch.
void vocab_parallel_embedding_backward(TpGroup& tp, float* dwte_local, float* dwpe, const float* dout, float* dout_full,
                                       const int* tokens, const VocabRange& vocab, int B, int T, int C);

// probs (N, Vl) = this rank's columns of softmax(logits) (may alias logits), losses (N) and the
// mean loss, the same on every rank. targets (N), global ids < V.
float vocab_parallel_cross_entropy_forward(TpGroup& tp, float* probs, float* losses, const float* logits,
                                           const int* targets, const VocabRange& vocab, int N);
// dlogits (N, Vl) = (probs - onehot(target)) * dloss on this rank's columns; no communication.
void vocab_parallel_cross_entropy_backward(float* dlogits, const float* probs, const int* targets,
                                           const VocabRange& vocab, float dloss, int N);

}  // namespace scalelab
