// The shard descriptions of model/shard.hpp (stages 06 and 07).
#include "model/shard.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace scalelab {

namespace {

void require_rank(int rank, int ranks, const char* setting) {
  require(ranks >= 1 && rank >= 0 && rank < ranks, setting,
          "rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " is not a rank of the group",
          "pass a rank in [0, ranks) and ranks >= 1");
}

TensorShard split(const ParamTensor& tensor, int dim, int rank, int t) {
  require_rank(rank, t, "tensor_parallel");
  const auto d = static_cast<std::size_t>(dim);
  require(d < tensor.shape.size(), "tensor_parallel",
          "tensor " + tensor.name + " has " + std::to_string(tensor.shape.size()) + " dimensions, no dimension " +
              std::to_string(dim) + " to split",
          "split a 1-D tensor by rows");
  const std::size_t extent = tensor.shape[d], ranks = static_cast<std::size_t>(t);
  require(extent % ranks == 0, "tensor_parallel",
          "dimension " + std::to_string(dim) + " of " + tensor.name + " (" + std::to_string(extent) +
              ") does not divide by " + std::to_string(t) + " ranks",
          "choose a tensor-parallel size that divides the heads and the channels");
  const std::size_t share = extent / ranks;
  TensorShard s;
  s.name = tensor.name;
  s.full_shape = tensor.shape;
  s.dim = dim;
  s.begin = share * static_cast<std::size_t>(rank);
  s.end = s.begin + share;
  return s;
}

// The shard as `runs` runs of `len` consecutive elements of the whole tensor, run r starting at
// r * stride + offset: one run for a row split, one run per row for a column split.
struct Runs {
  std::size_t runs, stride, offset, len;
};

Runs runs_of(const TensorShard& s) {
  std::size_t numel = 1;
  for (auto e : s.full_shape) numel *= e;
  const std::size_t dim0 = s.full_shape.at(0), row = numel / std::max<std::size_t>(dim0, 1);
  if (s.dim == 0) return {1, 0, s.begin * row, (s.end - s.begin) * row};
  const std::size_t per_col = row / s.full_shape.at(1);  // 1 for a 2-D tensor
  return {dim0, row, s.begin * per_col, (s.end - s.begin) * per_col};
}

}  // namespace

std::vector<std::size_t> TensorShard::shape() const {
  std::vector<std::size_t> r = full_shape;
  r.at(static_cast<std::size_t>(dim)) = end - begin;
  return r;
}

std::size_t TensorShard::numel() const {
  std::size_t n = 1;
  for (auto e : shape()) n *= e;
  return n;
}

TensorShard whole_tensor(const ParamTensor& tensor) { return split(tensor, 0, 0, 1); }
TensorShard shard_rows(const ParamTensor& tensor, int rank, int t) { return split(tensor, 0, rank, t); }
TensorShard shard_cols(const ParamTensor& tensor, int rank, int t) { return split(tensor, 1, rank, t); }

void copy_shard_out(const TensorShard& shard, const float* whole, float* part) {
  const Runs r = runs_of(shard);
  for (std::size_t i = 0; i < r.runs; ++i) {
    const float* from = whole + i * r.stride + r.offset;
    std::copy(from, from + r.len, part + i * r.len);
  }
}

void copy_shard_in(const TensorShard& shard, const float* part, float* whole) {
  const Runs r = runs_of(shard);
  for (std::size_t i = 0; i < r.runs; ++i)
    std::copy(part + i * r.len, part + (i + 1) * r.len, whole + i * r.stride + r.offset);
}

FlatShard flat_shard(std::size_t num_params, int rank, int d) {
  require_rank(rank, d, "zero");
  FlatShard f;
  f.num_params = num_params;
  f.per_rank = (num_params + static_cast<std::size_t>(d) - 1) / static_cast<std::size_t>(d);
  f.padded = f.per_rank * static_cast<std::size_t>(d);
  f.begin = f.per_rank * static_cast<std::size_t>(rank);
  f.end = f.begin + f.per_rank;
  return f;
}

}  // namespace scalelab
