// The block's backward split into the input gradient and deferred weight gradients (stage 05's
// zero-bubble schedule). The calls mirror block_backward (model/block.cpp) one for one.
#include "model/split_backward.hpp"

#include "core/blas.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"

namespace scalelab {

template <typename F>
void WeightGradTape<F>::reserve(std::size_t elements, MemoryTracker* tracker) {
  SCALELAB_CHECK(entries_.empty(), "a weight-gradient tape is reserved again before apply()");
  if (douts_.size() != elements) {
    douts_ = Buffer<F>();  // free first, so the peak is not the sum of the two
    douts_ = Buffer<F>(elements, MemCategory::kActivations, tracker);
  }
  used_ = 0;
}

template <typename F>
void WeightGradTape<F>::record(F* dweight, F* dbias, const F* dout, const F* inp, int N, int C, int OC) {
  const std::size_t n = static_cast<std::size_t>(N) * OC;
  SCALELAB_CHECK(used_ + n <= douts_.size(), "the weight-gradient tape holds ", douts_.size(), " values, ", used_ + n,
                 " were recorded");
  F* copy = douts_.data() + used_;
  std::copy(dout, dout + n, copy);
  used_ += n;
  entries_.push_back({dweight, dbias, inp, copy, N, C, OC});
}

template <typename F>
void WeightGradTape<F>::apply() {
  for (const Entry& e : entries_) matmul_backward_weight(e.dweight, e.dbias, e.dout, e.inp, e.N, e.C, e.OC);
  entries_.clear();
  douts_ = Buffer<F>();
  used_ = 0;
}

std::size_t block_tape_elements(int B, int T, int C) { return static_cast<std::size_t>(B) * T * 9 * C; }

template <typename F>
void matmul_backward_input(F* dinp, const F* dout, const F* weight, int N, int C, int OC) {
  gemm<F>(false, false, N, C, OC, F(1), dout, OC, weight, C, F(0), dinp, C);
}

template <typename F>
void matmul_backward_weight(F* dweight, F* dbias, const F* dout, const F* inp, int N, int C, int OC) {
  // The second and third pieces of matmul_backward (model/layers/matmul.cpp), unchanged.
  gemm<F>(true, false, OC, C, N, F(1), dout, OC, inp, C, F(1), dweight, C);
  if (dbias) matmul_backward_bias(dbias, dout, N, OC);
}

template <typename F>
void matmul_backward_bias(F* dbias, const F* dout, int N, int OC) {
  for (int i = 0; i < N; ++i) {
    const F* d = dout + static_cast<std::size_t>(i) * OC;
    for (int j = 0; j < OC; ++j) dbias[j] += d[j];
  }
}

namespace {

// dinp now; the rest taped.
template <typename F>
void linear_backward_input(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, int N, int C,
                           int OC, WeightGradTape<F>& tape) {
  matmul_backward_input(dinp, dout, weight, N, C, OC);
  tape.record(dweight, dbias, dout, inp, N, C, OC);
}

}  // namespace

template <typename F>
void block_backward_input(F* dres, const BlockView<F>& g, const BlockActs<F>& a, const BlockView<F>& w, const F* x,
                          BlockScratch<F>& s, int B, int T, int C, int NH, WeightGradTape<F>& tape,
                          AttentionBackwardFn<F> attention_step) {
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  // MLP branch (dres is the gradient of the mlp projection's output too).
  linear_backward_input(s.dwide, g.fcproj_w, g.fcproj_b, dres, a.fch_gelu, w.fcproj_w, N, 4 * C, C, tape);
  gelu_backward(s.dwide, s.dwide, a.fch, 4 * NC);
  linear_backward_input(s.dbtc, g.fc_w, g.fc_b, s.dwide, a.ln2, w.fc_w, N, C, 4 * C, tape);
  layernorm_backward(dres, g.ln2_w, g.ln2_b, s.dbtc, a.residual2, w.ln2_w, a.ln2_mean, a.ln2_rstd, N, C);
  // Attention branch.
  linear_backward_input(s.dbtc, g.attproj_w, g.attproj_b, dres, a.atty, w.attproj_w, N, C, C, tape);
  attention_step(s.dwide, s, s.dbtc, a, B, T, C, NH);  // dqkv in dwide
  linear_backward_input(s.dbtc, g.qkv_w, g.qkv_b, s.dwide, a.ln1, w.qkv_w, N, C, 3 * C, tape);
  layernorm_backward(dres, g.ln1_w, g.ln1_b, s.dbtc, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, N, C);
}

template <typename F>
void block_backward_input(F* dres, const BlockView<F>& g, const BlockActs<F>& a, const BlockView<F>& w, const F* x,
                          BlockScratch<F>& s, int B, int T, int C, int NH, WeightGradTape<F>& tape) {
  block_backward_input(dres, g, a, w, x, s, B, T, C, NH, tape,
                       block_functions<F>(AttentionKind::kNaive).attention_backward);
}

template void matmul_backward_input<float>(float*, const float*, const float*, int, int, int);
template void matmul_backward_input<double>(double*, const double*, const double*, int, int, int);
template void matmul_backward_weight<float>(float*, float*, const float*, const float*, int, int, int);
template void matmul_backward_weight<double>(double*, double*, const double*, const double*, int, int, int);
template void matmul_backward_bias<float>(float*, const float*, int, int);
template void matmul_backward_bias<double>(double*, const double*, int, int);
template class WeightGradTape<float>;
template class WeightGradTape<double>;
template void block_backward_input<float>(float*, const BlockView<float>&, const BlockActs<float>&,
                                          const BlockView<float>&, const float*, BlockScratch<float>&, int, int, int,
                                          int, WeightGradTape<float>&, AttentionBackwardFn<float>);
template void block_backward_input<float>(float*, const BlockView<float>&, const BlockActs<float>&,
                                          const BlockView<float>&, const float*, BlockScratch<float>&, int, int, int,
                                          int, WeightGradTape<float>&);
template void block_backward_input<double>(double*, const BlockView<double>&, const BlockActs<double>&,
                                           const BlockView<double>&, const double*, BlockScratch<double>&, int, int,
                                           int, int, WeightGradTape<double>&, AttentionBackwardFn<double>);
template void block_backward_input<double>(double*, const BlockView<double>&, const BlockActs<double>&,
                                           const BlockView<double>&, const double*, BlockScratch<double>&, int, int,
                                           int, int, WeightGradTape<double>&);

}  // namespace scalelab
