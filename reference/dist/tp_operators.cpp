// f and g over MPI or NCCL (comm/communicator.hpp), each collective written to the ledger.
#include "dist/tp_operators.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "precision/half_type.hpp"

namespace scalelab {

namespace {

// One collective of `count` elements (the whole buffer's, as the Communicator counts them) from
// `in` (in_count of them) into `out` (out_count), recorded in the ledger. In mixed precision the
// values cross as half: `in` rounded to half (the partial sums' rounding, or exact where they are
// half values already), the result widened back into `out` (exact).
void collective(TpGroup& tp, CommOp op, std::size_t count, const float* in, std::size_t in_count, float* out,
                std::size_t out_count, ReduceOp reduce = ReduceOp::kSum) {
  tp.ledger.push_back({op, count, tp.where, tp.half ? 2u : 4u});
  Communicator& c = *tp.comm;
  if (!tp.half) {
    if (op == CommOp::kAllGather) c.all_gather(in, out, count, DataType::kFloat32);
    if (op == CommOp::kAllReduce) c.all_reduce(in, out, count, DataType::kFloat32, reduce);
    if (op == CommOp::kReduceScatter) c.reduce_scatter(in, out, count, DataType::kFloat32, reduce);
    return;
  }
  const DataType t = half_data_type(*tp.half);
  if (tp.send_half.size() < in_count) tp.send_half = Buffer<std::uint16_t>(in_count, MemCategory::kComm, tp.tracker);
  if (tp.recv_half.size() < out_count) tp.recv_half = Buffer<std::uint16_t>(out_count, MemCategory::kComm, tp.tracker);
  float_to_half(tp.send_half.data(), in, in_count, *tp.half);
  if (op == CommOp::kAllGather) c.all_gather(tp.send_half.data(), tp.recv_half.data(), count, t);
  if (op == CommOp::kAllReduce) c.all_reduce(tp.send_half.data(), tp.recv_half.data(), count, t, reduce);
  if (op == CommOp::kReduceScatter) c.reduce_scatter(tp.send_half.data(), tp.recv_half.data(), count, t, reduce);
  half_to_float(out, tp.recv_half.data(), out_count, *tp.half);
}

void copy_rows(const float* from, float* to, std::size_t n) {
  if (from != to) std::copy(from, from + n, to);
}

}  // namespace

void f_forward(TpGroup& tp, const float* x, float* x_full, std::size_t N, int C) {
  const std::size_t NC = N * static_cast<std::size_t>(C);
  if (!tp.sequence_parallel) {
    copy_rows(x, x_full, NC);  // identity: every rank already holds all N rows
    return;
  }
  collective(tp, CommOp::kAllGather, NC, x, NC / tp.size(), x_full, NC);
}

void f_backward(TpGroup& tp, float* dx_full, float* dx, std::size_t N, int C) {
  const std::size_t NC = N * static_cast<std::size_t>(C);
  if (!tp.sequence_parallel) {
    collective(tp, CommOp::kAllReduce, NC, dx_full, NC, dx, NC);
    return;
  }
  collective(tp, CommOp::kReduceScatter, NC, dx_full, NC, dx, NC / tp.size());
}

void g_forward(TpGroup& tp, float* y_partial, float* y, std::size_t N, int C) {
  f_backward(tp, y_partial, y, N, C);  // the same collective: sum the partials (over all rows, or into mine)
}

void g_backward(TpGroup& tp, const float* dy, float* dy_full, std::size_t N, int C) {
  f_forward(tp, dy, dy_full, N, C);  // the same collective: every rank needs every row
}

void tp_all_reduce(TpGroup& tp, float* data, std::size_t count, ReduceOp op) {
  tp.ledger.push_back({CommOp::kAllReduce, count, tp.where, 4});
  tp.comm->all_reduce(data, data, count, DataType::kFloat32, op);
}

void tp_all_reduce_half(TpGroup& tp, std::uint16_t* data, std::size_t count) {
  SCALELAB_CHECK(tp.half.has_value(), "tp_all_reduce_half on an fp32 tensor-parallel group");
  tp.ledger.push_back({CommOp::kAllReduce, count, tp.where, 2});
  tp.comm->all_reduce(data, data, count, half_data_type(*tp.half), ReduceOp::kSum);
}

}  // namespace scalelab
