// f and g over MPI or NCCL (comm/communicator.hpp), each collective written to the ledger.
#include "dist/tp_operators.hpp"

#include <algorithm>

namespace scalelab {

namespace {

void record(TpGroup& tp, CommOp op, std::size_t elements) { tp.ledger.push_back({op, elements, tp.where}); }

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
  record(tp, CommOp::kAllGather, NC);
  tp.comm->all_gather(x, x_full, NC, DataType::kFloat32);
}

void f_backward(TpGroup& tp, float* dx_full, float* dx, std::size_t N, int C) {
  const std::size_t NC = N * static_cast<std::size_t>(C);
  if (!tp.sequence_parallel) {
    record(tp, CommOp::kAllReduce, NC);
    tp.comm->all_reduce(dx_full, dx, NC, DataType::kFloat32, ReduceOp::kSum);
    return;
  }
  record(tp, CommOp::kReduceScatter, NC);
  tp.comm->reduce_scatter(dx_full, dx, NC, DataType::kFloat32, ReduceOp::kSum);
}

void g_forward(TpGroup& tp, float* y_partial, float* y, std::size_t N, int C) {
  f_backward(tp, y_partial, y, N, C);  // the same collective: sum the partials (over all rows, or into mine)
}

void g_backward(TpGroup& tp, const float* dy, float* dy_full, std::size_t N, int C) {
  f_forward(tp, dy, dy_full, N, C);  // the same collective: every rank needs every row
}

void tp_all_reduce(TpGroup& tp, float* data, std::size_t count, ReduceOp op) {
  record(tp, CommOp::kAllReduce, count);
  tp.comm->all_reduce(data, data, count, DataType::kFloat32, op);
}

}  // namespace scalelab
