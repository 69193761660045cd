// Shard layouts (model/shard.hpp), the descriptions stages 06 (tensor parallelism) and 07 (ZeRO)
// cut tensors and the flat buffer with. Checked against ranges written out by hand and against
// the defining property: the shards of all ranks cover the whole exactly once.
#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "core/error.hpp"
#include "model/shard.hpp"

using namespace scalelab;

namespace {

ParamTensor tensor(const std::string& name, std::vector<std::size_t> shape) {
  ParamTensor t;
  t.name = name;
  t.shape = std::move(shape);
  t.numel = 1;
  for (auto d : t.shape) t.numel *= d;
  return t;
}

}  // namespace

TEST_CASE("shard_rows and shard_cols: equal ranges of the split dimension, the shard's own shape") {
  const ParamTensor qkv = tensor("transformer.h.0.attn.c_attn.weight", {96, 32});
  const TensorShard r1 = shard_rows(qkv, 1, 3);
  CHECK(r1.name == qkv.name);
  CHECK(r1.full_shape == std::vector<std::size_t>{96, 32});
  CHECK(r1.dim == 0);
  CHECK(r1.begin == 32);
  CHECK(r1.end == 64);
  CHECK(r1.shape() == std::vector<std::size_t>{32, 32});
  CHECK(r1.numel() == 1024);
  CHECK_FALSE(r1.is_whole());
  const TensorShard c3 = shard_cols(tensor("transformer.h.0.mlp.c_proj.weight", {32, 128}), 3, 4);
  CHECK(c3.dim == 1);
  CHECK(c3.begin == 96);
  CHECK(c3.end == 128);
  CHECK(c3.shape() == std::vector<std::size_t>{32, 32});
  CHECK(whole_tensor(qkv).is_whole());
  CHECK(whole_tensor(qkv).shape() == qkv.shape);
}

TEST_CASE("shards: out and back in, every element once, for row and column splits") {
  const ParamTensor t = tensor("w", {6, 4});
  std::vector<float> whole(t.numel);
  std::iota(whole.begin(), whole.end(), 0.0f);  // element (i, j) holds 4i + j
  for (int ranks : {1, 2, 3}) {
    for (int dim : {0, 1}) {
      if (t.shape[static_cast<std::size_t>(dim)] % static_cast<std::size_t>(ranks) != 0) continue;
      INFO(ranks << " ranks, split dimension " << dim);
      std::vector<float> rebuilt(t.numel, -1.0f);
      for (int r = 0; r < ranks; ++r) {
        const TensorShard s = dim == 0 ? shard_rows(t, r, ranks) : shard_cols(t, r, ranks);
        std::vector<float> part(s.numel());
        copy_shard_out(s, whole.data(), part.data());
        // Independent: element k of the shard is (i, j) of its own shape, offset along dim.
        const std::size_t cols = s.shape()[1];
        for (std::size_t k = 0; k < part.size(); ++k) {
          const std::size_t i = k / cols + (dim == 0 ? s.begin : 0), j = k % cols + (dim == 1 ? s.begin : 0);
          INFO("rank " << r << ", shard element " << k);
          CHECK(part[k] == static_cast<float>(4 * i + j));
        }
        copy_shard_in(s, part.data(), rebuilt.data());
      }
      CHECK(rebuilt == whole);
    }
  }
}

TEST_CASE("shards: splits that do not divide, 1-D column splits and bad ranks are refused") {
  const ParamTensor w = tensor("transformer.h.0.mlp.c_fc.weight", {128, 32});
  CHECK_THROWS_WITH(shard_rows(w, 0, 3),
                    Catch::Contains("tensor_parallel: dimension 0 of transformer.h.0.mlp.c_fc.weight "
                                    "(128) does not divide by 3 ranks"));
  CHECK_THROWS_WITH(shard_cols(tensor("b", {32}), 0, 2), Catch::Contains("tensor b has 1 dimensions, no dimension 1"));
  CHECK_THROWS_WITH(shard_rows(w, 4, 4), Catch::Contains("rank 4 of 4 is not a rank of the group"));
}

TEST_CASE("flat_shard: equal padded ranges of ceil(n/d) that cover [0, n) exactly once") {
  // 10 parameters over 4 ranks: ranges of 3, the last holds 1 real parameter and 2 of padding.
  const FlatShard last = flat_shard(10, 3, 4);
  CHECK(last.per_rank == 3);
  CHECK(last.padded == 12);
  CHECK(last.begin == 9);
  CHECK(last.end == 12);
  CHECK(last.valid() == 1);
  CHECK(last.padding() == 2);
  // 2 parameters over 4 ranks: ranks 2 and 3 hold only padding.
  CHECK(flat_shard(2, 3, 4).valid() == 0);
  CHECK(flat_shard(2, 3, 4).padding() == 1);
  for (std::size_t n : {1, 7, 12, 1000003})
    for (int d = 1; d <= 5; ++d) {
      INFO(n << " parameters, " << d << " ranks");
      std::size_t covered = 0, next = 0;
      for (int r = 0; r < d; ++r) {
        const FlatShard s = flat_shard(n, r, d);
        CHECK(s.begin == next);
        CHECK(s.end - s.begin == (n + d - 1) / d);
        next = s.end;
        covered += s.valid();
      }
      CHECK(covered == n);
      CHECK(next == flat_shard(n, 0, d).padded);
      CHECK(next - n < static_cast<std::size_t>(d));  // less than one element of padding per rank
    }
  CHECK_THROWS_WITH(flat_shard(10, 0, 0), Catch::Contains("zero: rank 0 of 0"));
}
