// The kernels stage 06 adds on the GPU (kernels/dist/gpu_tp_chunk.hpp), the twins of
// dist/vocab_parallel.hpp's arithmetic and of the row-parallel bias (dist/tp_linear.hpp). The
// collectives between them are the model's; each kernel is local to one rank.
//
// Token ids arrive localised by the host: local = id - begin for an id in this rank's vocabulary
// rows [begin, begin + Vl), -1 for any other id (another rank's row, or no row here at all). So
// "is it mine" is one comparison in every kernel, and the cross-entropy's backward is the
// whole-vocabulary kernel (kernels/layers/crossentropy.hpp) on this rank's columns: a target of
// -1 matches no column.
// F: float, bf16, fp16; the per-row statistics are fp32.
#pragma once

#include <cuda_runtime_api.h>

namespace scalelab::cuda {

// Rows are token positions of the flattened (B T) axis, row n at position n mod T. Under sequence
// parallelism a rank's rows of the LayerNorm/residual region are [first_row, first_row + rows).

// out (N,C) = wte_local[local[n]] where local >= 0, else 0. The sum over the tensor-parallel
// ranks (an all-reduce, or a reduce-scatter) is then the whole lookup, exactly: every addend but
// one is zero.
template <typename F>
void vocab_embedding_forward(F* out, const int* local_tokens, const F* wte_local, int N, int C, cudaStream_t stream);
// out (rows,C) += wpe[(first_row + i) mod T] on row i (after the reduction, so the replicated
// position embedding counts once).
template <typename F>
void add_position_embedding(F* out, const F* wpe, int first_row, int rows, int T, int C, cudaStream_t stream);
// dwte_local rows += dout (N,C) rows of this rank's tokens (atomicAdd, as encoder_backward).
template <typename F>
void vocab_embedding_backward(F* dwte_local, const F* dout, const int* local_tokens, int N, int C, cudaStream_t stream);
// dwpe (maxT,C) += dout (rows,C) row i at position (first_row + i) mod T, each position's rows
// summed in row order (deterministic). Under sequence parallelism a partial sum, which the
// replicated gradients' sum over the group completes.
template <typename F>
void position_embedding_backward(F* dwpe, const F* dout, int first_row, int rows, int T, int C, cudaStream_t stream);

// The vocab-parallel cross-entropy's three passes over this rank's logits (N, V_real), rows ld
// apart; V_real = VocabRange::real() columns are real tokens (the padding rows of wte have no
// logits here at all). Between them the model all-reduces: the maxima (MAX), then the sums of
// exponentials and the target logits (SUM).
//   row_max[i]     = max_j logits[i,j]                       (-inf with no columns)
//   sum_exp[i]     = sum_j exp(logits[i,j] - row_max[i])     (row_max: the group's, reduced)
//   target_logit[i] = logits[i, local_targets[i]], or 0 where the target is another rank's
template <typename F>
void vocab_ce_row_max(float* row_max, const F* logits, int N, int V_real, int ld, cudaStream_t stream);
template <typename F>
void vocab_ce_row_sums(float* sum_exp, float* target_logit, const F* logits, const float* row_max,
                       const int* local_targets, int N, int V_real, int ld, cudaStream_t stream);
// With the group's three numbers per row: probs (N, V_real) = exp(logits - max) / sum (in place
// over the logits) and losses[i] = log sum - (target_logit - max), crossentropy_forward's formula.
template <typename F>
void vocab_ce_finish(F* probs, float* losses, const F* logits, const float* row_max, const float* sum_exp,
                     const float* target_logit, int N, int V_real, int ld, cudaStream_t stream);

// y (N,C) += bias (C) on every row: a row-parallel layer's bias, added once after the reduction.
template <typename F>
void add_bias(F* y, const F* bias, int N, int C, cudaStream_t stream);

}  // namespace scalelab::cuda
