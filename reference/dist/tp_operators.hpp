// Stage 06: the two conjugate operators of tensor parallelism (Megatron-LM, Shoeybi et al. 2019,
// section 3, where they are called f and g), and the group they communicate over.
//
//   f  in front of a column-parallel layer:  forward identity,   backward all-reduce
//   g  after a row-parallel layer:           forward all-reduce, backward identity
//
// A column-parallel layer needs its whole input on every rank and leaves each rank a slice of
// the output features; a row-parallel layer takes that slice and leaves each rank a partial sum
// of the whole output. So f's backward must add the ranks' partial input gradients, and g's
// forward must add the partial outputs. Each is the other's transpose: that is why they come
// in a pair and why a block needs one of each per column -> row pair (attention, MLP).
//
// With sequence parallelism (Korthikanti et al. 2022) the regions between the pairs (LayerNorm,
// residual, embedding output) hold only this rank's N/t token rows, and the operators become
//
//   f  forward all-gather (N/t -> N rows),   backward reduce-scatter (N -> N/t rows)
//   g  forward reduce-scatter,               backward all-gather
//
// An all-gather plus a reduce-scatter move exactly the bytes of one all-reduce (a ring
// all-reduce IS a reduce-scatter then an all-gather), so the communication stays the same while
// the activations between the pairs shrink t-fold.
//
// Rows: activations are (N, C) with N = B*T token rows, batch-major. Under sequence parallelism
// rank r holds token rows [r N/t, (r+1) N/t) of the flattened (B*T) axis: a contiguous split,
// which for B = 1 is exactly Megatron's split of the sequence. Per-token operations (LayerNorm,
// residual adds, GELU-free regions) do not care which rows a rank holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm_stats.hpp"
#include "comm/communicator.hpp"
#include "core/memory.hpp"
#include "precision/half.hpp"

namespace scalelab {

// One collective of a tensor-parallel step, as the ledger records it.
struct TpCollective {
  CommOp op = CommOp::kAllReduce;
  std::size_t elements = 0;       // the whole buffer's count, as the Communicator takes it
  std::string where;              // the model's label at the time ("block 2 mlp", "cross-entropy")
  std::size_t element_bytes = 4;  // fp32; 2 for the half activations of mixed precision
};

// The tensor-parallel group of a layer: its communicator, whether sequence parallelism is on,
// and the ledger of every collective the operators issued (the test checks it against the
// formula; the docs print it).
struct TpGroup {
  Communicator* comm = nullptr;
  bool sequence_parallel = false;
  std::string where;                 // label for the next ledger entries (set by the model)
  std::vector<TpCollective> ledger;  // appended to by every collective below
  // Stage 03 with 06: the half format of a mixed-precision model, or none (fp32). With one, f and
  // g send half tensors, 2 bytes an element, as a GPU's bf16 all-reduce does: the partial sums
  // are rounded to half before they are added, and the sum is rounded after each addition
  // (comm/datatype.cpp); and round() rounds each layer's output to half, as the layer's kernel
  // would write it (precision/mixed_model.hpp). Without one both are fp32 and round() does nothing.
  std::optional<HalfFormat> half;
  // The half collectives' send and receive buffers: grown to the largest collective, then reused,
  // and counted as communication buffers (kComm) in `tracker` (the model's) like every other buffer.
  MemoryTracker* tracker = nullptr;
  Buffer<std::uint16_t> send_half, recv_half;

  int size() const { return comm->size(); }
  int rank() const { return comm->rank(); }
  // Token rows of the LayerNorm/residual regions on this rank: N, or N/t with sequence
  // parallelism (the model checks that t divides N).
  std::size_t local_rows(std::size_t N) const { return sequence_parallel ? N / size() : N; }
  // The first of them, as a row of the whole (N, C) activation.
  std::size_t first_row(std::size_t N) const { return sequence_parallel ? rank() * (N / size()) : 0; }
  // x (n) rounded in place to the half format's values; nothing in fp32.
  void round(float* x, std::size_t n) const {
    if (half) round_to_half(x, n, *half);
  }
};

// f forward: x (local rows, C) -> x_full (N, C). A copy (nothing when x_full == x) without
// sequence parallelism; an all-gather with it.
void f_forward(TpGroup& tp, const float* x, float* x_full, std::size_t N, int C);
// f backward: dx_full (N, C), this rank's partial d loss / d x -> dx (local rows, C), the sum over
// ranks. An all-reduce (in place when dx == dx_full) or a reduce-scatter. dx_full is clobbered.
void f_backward(TpGroup& tp, float* dx_full, float* dx, std::size_t N, int C);
// g forward: y_partial (N, C), this rank's partial output -> y (local rows, C), the sum over ranks.
// An all-reduce or a reduce-scatter. y_partial is clobbered.
void g_forward(TpGroup& tp, float* y_partial, float* y, std::size_t N, int C);
// g backward: dy (local rows, C) -> dy_full (N, C). A copy (nothing when equal) or an all-gather.
void g_backward(TpGroup& tp, const float* dy, float* dy_full, std::size_t N, int C);

// An all-reduce over the group outside f and g (the vocab-parallel cross-entropy's max, sum and
// target logit; the sequence-parallel sum of replicated gradients), recorded in the ledger.
void tp_all_reduce(TpGroup& tp, float* data, std::size_t count, ReduceOp op);
// The same on half values (a mixed-precision model's replicated gradients, summed in half).
void tp_all_reduce_half(TpGroup& tp, std::uint16_t* data, std::size_t count);

}  // namespace scalelab
