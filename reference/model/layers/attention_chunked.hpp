// Memory-efficient causal attention (stage 08), in the style of Rabe & Staats (2021), "Self-attention
// does not need O(n^2) memory": each query walks its keys in chunks with an online softmax, so no
// T x T matrix is ever formed. Forward saves only lse = log(sum_u exp(s_u)) per query; backward
// recomputes the probabilities from it. Same inputs, outputs and qkv layout as attention.hpp.
#pragma once

#include <cstddef>

namespace scalelab {

// Workspace elements that attention_chunked_forward and attention_chunked_backward need: one chunk
// of scores (the probabilities of one query against one chunk of keys). Independent of T and C.
std::size_t attention_chunked_scratch_elems(int chunk);

// out (B,T,C); lse (B,NH,T) log-sum-exp of each query's scaled scores, the only thing backward needs
// beyond out; scratch (attention_chunked_scratch_elems(chunk)) workspace; qkv (B,T,3C).
// chunk >= 1 keys per online-softmax step.
template <typename F>
void attention_chunked_forward(F* out, F* lse, F* scratch, const F* qkv, int B, int T, int C, int NH, int chunk);

// dqkv (B,T,3C) = (written); scratch (attention_chunked_scratch_elems(chunk)) workspace;
// dout (B,T,C); qkv (B,T,3C); out (B,T,C) and lse (B,NH,T) from attention_chunked_forward.
template <typename F>
void attention_chunked_backward(F* dqkv, F* scratch, const F* dout, const F* qkv, const F* out, const F* lse, int B,
                                int T, int C, int NH, int chunk);

}  // namespace scalelab
