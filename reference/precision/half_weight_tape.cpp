// The mixed-precision zero-bubble tape (stage 05 with stage 03).
#include "precision/half_weight_tape.hpp"

#include "core/error.hpp"
#include "model/split_backward.hpp"

namespace scalelab {

void HalfWeightTape::reserve(std::size_t elements, HalfFormat format, MemoryTracker* tracker) {
  SCALELAB_CHECK(entries_.empty(), "a weight-gradient tape is reserved again before apply()");
  format_ = format;
  douts_ = Buffer<std::uint16_t>();  // free first, so the peak is not the sum of the two
  douts_ = Buffer<std::uint16_t>(elements, MemCategory::kActivations, tracker);
  used_ = 0;
}

void HalfWeightTape::record(std::size_t dweight, std::size_t dbias, const float* dout, const std::uint16_t* inp, int N,
                            int C, int OC) {
  const std::size_t n = static_cast<std::size_t>(N) * OC;
  SCALELAB_CHECK(used_ + n <= douts_.size(), "the weight-gradient tape holds ", douts_.size(), " values, ", used_ + n,
                 " were recorded");
  float_to_half(douts_.data() + used_, dout, n, format_);  // exact: dout holds half values
  entries_.push_back({dweight, dbias, inp, used_, N, C, OC});
  used_ += n;
}

void HalfWeightTape::apply(std::uint16_t* grads, float* inp_stage, float* dout_stage, float* grad_stage) {
  for (const Entry& e : entries_) {
    const std::size_t w = static_cast<std::size_t>(e.OC) * e.C;
    const bool bias = e.dbias != kNoBias;
    float* dbias = bias ? grad_stage + w : nullptr;
    half_to_float(inp_stage, e.inp, static_cast<std::size_t>(e.N) * e.C, format_);
    half_to_float(dout_stage, douts_.data() + e.dout, static_cast<std::size_t>(e.N) * e.OC, format_);
    half_to_float(grad_stage, grads + e.dweight, w, format_);
    if (bias) half_to_float(dbias, grads + e.dbias, static_cast<std::size_t>(e.OC), format_);
    matmul_backward_weight(grad_stage, dbias, dout_stage, inp_stage, e.N, e.C, e.OC);
    float_to_half(grads + e.dweight, grad_stage, w, format_);
    if (bias) float_to_half(grads + e.dbias, dbias, static_cast<std::size_t>(e.OC), format_);
  }
  entries_.clear();
  douts_ = Buffer<std::uint16_t>();
  used_ = 0;
}

}  // namespace scalelab
