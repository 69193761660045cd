// Shard-shaped layouts: which part of a tensor, or of the flat parameter buffer, one rank holds.
// Pure descriptions with the functions that compute them; no memory is moved here.
//   TensorShard  tensor parallelism (stage 06): rows or columns of a 2-D tensor (Megatron's
//                column-parallel c_attn/c_fc split the rows of nn.Linear's (out, in) weight,
//                row-parallel c_proj its columns), or a range of a 1-D bias.
//   FlatShard    ZeRO (stage 07): a contiguous range of the flat buffer of num_params elements,
//                padded so that every one of d ranks holds the same number.
// dist/gather_weights.hpp saves a model from such shards.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "model/params.hpp"

namespace scalelab {

struct TensorShard {
  std::string name;                     // the tensor's nanoGPT name
  std::vector<std::size_t> full_shape;  // the whole tensor's shape, e.g. {3C, C}
  int dim = 0;                          // the split dimension: 0 rows, 1 columns
  std::size_t begin = 0, end = 0;       // [begin, end) along dim

  // The shard's own shape: full_shape with dim's extent end - begin.
  std::vector<std::size_t> shape() const;
  std::size_t numel() const;
  bool is_whole() const { return begin == 0 && end == full_shape.at(static_cast<std::size_t>(dim)); }
};

// The whole tensor as a shard (dim 0, all rows): what a rank holding it unsplit contributes.
TensorShard whole_tensor(const ParamTensor& tensor);
// Rank `rank` of t's equal share of the tensor's rows (dim 0) or columns (dim 1; 2-D tensors
// only). ConfigError when t does not divide that dimension (Megatron's rule: split heads and
// features evenly) or rank is not in [0, t).
TensorShard shard_rows(const ParamTensor& tensor, int rank, int t);
TensorShard shard_cols(const ParamTensor& tensor, int rank, int t);

// Copies a shard's values (row-major in shard.shape()) out of the whole tensor, or back into it.
void copy_shard_out(const TensorShard& shard, const float* whole, float* part);
void copy_shard_in(const TensorShard& shard, const float* part, float* whole);

struct FlatShard {
  std::size_t begin = 0, end = 0;  // [begin, end) of the padded buffer: per_rank elements
  std::size_t per_rank = 0;        // ceil(num_params / d)
  std::size_t padded = 0;          // d * per_rank >= num_params
  std::size_t num_params = 0;

  // The part of [begin, end) below num_params: the real parameters this rank holds.
  std::size_t valid_end() const { return end < num_params ? end : num_params; }
  std::size_t valid() const { return begin < num_params ? valid_end() - begin : 0; }
  std::size_t padding() const { return (end - begin) - valid(); }
};

// Rank `rank` of d's range of a flat buffer of num_params elements, as ZeRO cuts it: equal
// ranges of ceil(num_params/d), the last rank's padded past num_params. ConfigError for d < 1
// or rank outside [0, d).
FlatShard flat_shard(std::size_t num_params, int rank, int d);

}  // namespace scalelab
