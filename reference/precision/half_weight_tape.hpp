// Stage 05's zero-bubble split (model/split_backward.hpp) in mixed precision: the tape of deferred
// weight gradients of a half model (precision/mixed_model.hpp, and a tensor-parallel shard,
// dist/tp_mixed_model.hpp). The input pass records, for each linear layer, its output gradient in
// half (fp32 values that half holds exactly: every activation gradient is rounded to half) and
// where its input is kept (a saved half activation); the weight pass widens the layer's weight
// (and bias) gradients, adds the deferred products in fp32 (matmul_backward_weight, the pieces
// matmul_backward would have run) and rounds them once. Each gradient element is then rounded
// once per micro-batch, as the whole backward rounds it, so the split changes no bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/memory.hpp"
#include "precision/half.hpp"

namespace scalelab {

class HalfWeightTape {
 public:
  static constexpr std::size_t kNoBias = static_cast<std::size_t>(-1);

  // Room for `elements` output-gradient values in half (activations memory: kept until apply).
  void reserve(std::size_t elements, HalfFormat format, MemoryTracker* tracker);
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C) and dbias (OC) += column sums of dout, later; the
  // gradients at these offsets of the flat half buffer (dbias kNoBias: none). dout (N,OC) is
  // copied now; inp (N,C) must stay valid until apply().
  void record(std::size_t dweight, std::size_t dbias, const float* dout, const std::uint16_t* inp, int N, int C,
              int OC);
  // The recorded products in the order recorded, into grads (the flat half buffer), through fp32
  // workspace: inp_stage (N,C), dout_stage (N,OC), grad_stage (OC C + OC) for the largest layer.
  // Then the tape is empty and its memory freed.
  void apply(std::uint16_t* grads, float* inp_stage, float* dout_stage, float* grad_stage);
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    std::size_t dweight, dbias;
    const std::uint16_t* inp;
    std::size_t dout;  // offset in douts_
    int N, C, OC;
  };
  HalfFormat format_ = HalfFormat::kBF16;
  Buffer<std::uint16_t> douts_;
  std::vector<Entry> entries_;
  std::size_t used_ = 0;
};

}  // namespace scalelab
