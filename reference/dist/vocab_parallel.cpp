// The vocab-parallel embedding and cross-entropy (stage 06).
#include "dist/vocab_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "core/fastmath.hpp"
#include "core/reduce.hpp"

namespace scalelab {

namespace {

bool holds(const VocabRange& v, int token) { return token >= v.begin && token < v.begin + v.real(); }

}  // namespace

void vocab_parallel_embedding_forward(TpGroup& tp, float* out, float* partial, const int* tokens,
                                      const float* wte_local, const float* wpe, const VocabRange& vocab, int B, int T,
                                      int C) {
  const std::size_t N = static_cast<std::size_t>(B) * T;
  for (std::size_t i = 0; i < N; ++i) {
    float* o = partial + i * C;
    if (holds(vocab, tokens[i])) {
      const float* row = wte_local + static_cast<std::size_t>(tokens[i] - vocab.begin) * C;
      std::copy(row, row + C, o);
    } else {
      std::fill(o, o + C, 0.0f);  // another rank's token: it contributes the row
    }
  }
  g_forward(tp, partial, out, N, C);
  const std::size_t first = tp.first_row(N), rows = tp.local_rows(N);
  for (std::size_t i = 0; i < rows; ++i) {
    const float* pe = wpe + ((first + i) % static_cast<std::size_t>(T)) * C;
    for (int c = 0; c < C; ++c) out[i * C + c] += pe[c];
  }
}

void vocab_parallel_embedding_backward(TpGroup& tp, float* dwte_local, float* dwpe, const float* dout, float* dout_full,
                                       const int* tokens, const VocabRange& vocab, int B, int T, int C) {
  const std::size_t N = static_cast<std::size_t>(B) * T;
  const std::size_t first = tp.first_row(N), rows = tp.local_rows(N);
  for (std::size_t i = 0; i < rows; ++i) {  // wpe: replicated, fed by this rank's rows
    float* dpe = dwpe + ((first + i) % static_cast<std::size_t>(T)) * C;
    for (int c = 0; c < C; ++c) dpe[c] += dout[i * C + c];
  }
  g_backward(tp, dout, dout_full, N, C);  // wte rows: every row whose token this rank holds
  for (std::size_t i = 0; i < N; ++i) {
    if (!holds(vocab, tokens[i])) continue;
    float* dte = dwte_local + static_cast<std::size_t>(tokens[i] - vocab.begin) * C;
    for (int c = 0; c < C; ++c) dte[c] += dout_full[i * C + c];
  }
}

float vocab_parallel_cross_entropy_forward(TpGroup& tp, float* probs, float* losses, const float* logits,
                                           const int* targets, const VocabRange& vocab, int N) {
  // LAB 06 BEGIN vocab_parallel_cross_entropy_forward: section 3
  const int Vl = vocab.local, real = vocab.real();  // columns [real, Vl) are padding
  const std::size_t rows = static_cast<std::size_t>(N);
  std::vector<float> maxv(rows), sum(rows), target_logit(rows);
  // 1. The row maximum over this rank's real columns, then over all ranks.
  for (std::size_t i = 0; i < rows; ++i)
    maxv[i] = real > 0 ? reduce_max(logits + i * Vl, real) : -std::numeric_limits<float>::infinity();
  tp_all_reduce(tp, maxv.data(), rows, ReduceOp::kMax);
  // 2. The target's logit: from the one rank whose range holds it (0 from the others). Read
  //    before the exponentials overwrite the logits (probs may alias them).
  for (std::size_t i = 0; i < rows; ++i)
    target_logit[i] = holds(vocab, targets[i]) ? logits[i * Vl + (targets[i] - vocab.begin)] : 0.0f;
  tp_all_reduce(tp, target_logit.data(), rows, ReduceOp::kSum);
  // 3. exp(z - max) on the real columns, 0 on the padding; the sum over all ranks' columns.
  for (std::size_t i = 0; i < rows; ++i) {
    const float* z = logits + i * Vl;
    float* p = probs + i * Vl;
    for (int j = 0; j < real; ++j) p[j] = fast_exp(z[j] - maxv[i]);
    std::fill(p + real, p + Vl, 0.0f);
    sum[i] = reduce_sum(p, Vl);
  }
  tp_all_reduce(tp, sum.data(), rows, ReduceOp::kSum);
  double total = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    const float inv = 1.0f / sum[i];
    for (int j = 0; j < real; ++j) probs[i * Vl + j] *= inv;
    losses[i] = std::log(sum[i]) - (target_logit[i] - maxv[i]);
    total += losses[i];
  }
  return static_cast<float>(total / N);
  // LAB 06 END
}

void vocab_parallel_cross_entropy_backward(float* dlogits, const float* probs, const int* targets,
                                           const VocabRange& vocab, float dloss, int N) {
  // LAB 06 BEGIN vocab_parallel_cross_entropy_backward: section 3
  const int Vl = vocab.local;
  for (std::size_t i = 0; i < static_cast<std::size_t>(N); ++i) {
    const float* p = probs + i * Vl;
    float* d = dlogits + i * Vl;
    for (int j = 0; j < Vl; ++j) d[j] = p[j] * dloss;                    // padding: probability 0, gradient 0
    if (holds(vocab, targets[i])) d[targets[i] - vocab.begin] -= dloss;  // the target's column is on this rank
  }
  // LAB 06 END
}

}  // namespace scalelab
