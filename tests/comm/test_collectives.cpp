// The Communicator interface on its backend (one rank: local; 1-4 ranks: MPI): point to point,
// every built-in collective in place and out of place for odd counts, splits, the counters,
// and the errors for bad arguments. Expected values are closed-form sums over ranks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "compare.hpp"
#include "core/error.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;
using Catch::Matchers::Contains;

namespace {
const std::size_t kCounts[] = {0, 1, 3, 7, 1000, 100003};

// Rank r's value at i and its sum, max and min over n ranks.
double value(int r, std::size_t i) { return static_cast<double>((r + 1) * static_cast<int>(i % 11) + 3 * r); }
double sum_of(int n, std::size_t i) { return static_cast<double>((i % 11) * n * (n + 1) / 2 + 3 * n * (n - 1) / 2); }
}  // namespace

TEST_CASE("point to point: a shift around the ring with isend/irecv, send/recv and test") {
  Communicator& comm = test_world();
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  INFO(where(comm));
  std::vector<std::int64_t> out(5), in(5, -1);
  for (int i = 0; i < 5; ++i) out[static_cast<std::size_t>(i)] = 100 * r + i;
  Request rq = comm.irecv(in.data(), in.size(), DataType::kInt64, prev, 7);
  Request sq = comm.isend(out.data(), out.size(), DataType::kInt64, next, 7);
  CHECK(rq.pending());
  while (!comm.test(rq)) {
  }
  comm.wait(sq);
  CHECK_FALSE(rq.pending());
  for (int i = 0; i < 5; ++i) CHECK(in[static_cast<std::size_t>(i)] == 100 * prev + i);

  // Blocking forms, ordered so that no rank waits on itself: even ranks send first.
  double token = r, got = -1;
  if (r % 2 == 0) {
    comm.send(&token, 1, DataType::kFloat64, next, 1);
    comm.recv(&got, 1, DataType::kFloat64, prev, 1);
  } else {
    comm.recv(&got, 1, DataType::kFloat64, prev, 1);
    comm.send(&token, 1, DataType::kFloat64, next, 1);
  }
  CHECK(got == prev);
  const CommStats& s = comm.stats();
  CHECK(s[CommOp::kSend].calls >= 2);
}

TEST_CASE("built-in all-reduce: sum, max, min, in place and out of place") {
  Communicator& comm = test_world();
  const int n = comm.size(), r = comm.rank();
  for (std::size_t count : kCounts) {
    INFO(where(comm) << ", count " << count);
    std::vector<double> x(count), out(count), want_sum(count), want_max(count), want_min(count);
    for (std::size_t i = 0; i < count; ++i) {
      x[i] = value(r, i);
      want_sum[i] = sum_of(n, i);
      want_max[i] = value(n - 1, i);
      want_min[i] = value(0, i);
    }
    comm.all_reduce(x.data(), out.data(), count, DataType::kFloat64, ReduceOp::kSum);
    CHECK_MATCH(compare_bitwise("all_reduce sum", out.data(), want_sum.data(), count));
    comm.all_reduce(x.data(), out.data(), count, DataType::kFloat64, ReduceOp::kMax);
    CHECK_MATCH(compare_bitwise("all_reduce max", out.data(), want_max.data(), count));
    comm.all_reduce(x.data(), out.data(), count, DataType::kFloat64, ReduceOp::kMin);
    CHECK_MATCH(compare_bitwise("all_reduce min", out.data(), want_min.data(), count));
    Request q = comm.iall_reduce(x.data(), x.data(), count, DataType::kFloat64, ReduceOp::kSum);
    comm.wait(q);
    CHECK_MATCH(compare_bitwise("iall_reduce in place", x.data(), want_sum.data(), count));
  }
}

TEST_CASE("built-in reduce-scatter and all-gather use the block partition, in place and out of place") {
  Communicator& comm = test_world();
  const int n = comm.size(), r = comm.rank();
  for (std::size_t count : kCounts) {
    INFO(where(comm) << ", count " << count);
    const BlockPartition p = comm.partition(count);
    const std::size_t off = p.offset(r), len = p.size(r);
    std::vector<float> x(count), block(len), want(len);
    for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<float>(value(r, i));
    for (std::size_t i = 0; i < len; ++i) want[i] = static_cast<float>(sum_of(n, off + i));
    comm.reduce_scatter(x.data(), block.data(), count, DataType::kFloat32, ReduceOp::kSum);
    CHECK_MATCH(compare_bitwise("reduce_scatter out of place", block.data(), want.data(), len));
    comm.reduce_scatter(x.data(), x.data() + off, count, DataType::kFloat32, ReduceOp::kSum);
    CHECK_MATCH(compare_bitwise("reduce_scatter in place", x.data() + off, want.data(), len));

    std::vector<float> mine(len), gathered(count, -1.0f), index(count);
    std::iota(index.begin(), index.end(), 0.0f);
    for (std::size_t i = 0; i < len; ++i) mine[i] = static_cast<float>(off + i);
    comm.all_gather(mine.data(), gathered.data(), count, DataType::kFloat32);
    CHECK_MATCH(compare_bitwise("all_gather out of place", gathered.data(), index.data(), count));
    std::vector<float> inplace(count, -1.0f);
    for (std::size_t i = 0; i < len; ++i) inplace[off + i] = static_cast<float>(off + i);
    comm.all_gather(inplace.data() + off, inplace.data(), count, DataType::kFloat32);
    CHECK_MATCH(compare_bitwise("all_gather in place", inplace.data(), index.data(), count));
  }
}

TEST_CASE("broadcast from every root, and a barrier") {
  Communicator& comm = test_world();
  const int n = comm.size(), r = comm.rank();
  for (int root = 0; root < n; ++root) {
    INFO(where(comm) << ", root " << root);
    std::vector<std::int32_t> x(1001, r == root ? 17 * root + 1 : -1);
    comm.broadcast(x.data(), x.size(), root);
    CHECK(std::all_of(x.begin(), x.end(), [&](std::int32_t v) { return v == 17 * root + 1; }));
  }
  comm.barrier();
  CHECK(comm.stats()[CommOp::kBarrier].calls >= 1);
}

TEST_CASE("counters: calls, bytes and time per operation") {
  Communicator& comm = test_world();
  const int n = comm.size();
  INFO(where(comm));
  comm.stats().reset();
  const std::size_t count = 1000 * static_cast<std::size_t>(n);
  const std::uint64_t S = count * sizeof(float);
  std::vector<float> x(count, 1.0f);
  comm.all_reduce(x.data(), count);
  comm.all_reduce(x.data(), count);
  comm.reduce_scatter(x.data(), x.data() + comm.partition(count).offset(comm.rank()), count, DataType::kFloat32,
                      ReduceOp::kSum);
  const CommStats& s = comm.stats();
  // Built-in collectives are counted with the volume of a bandwidth-optimal ring.
  CHECK(s[CommOp::kAllReduce].calls == 2);
  CHECK(s[CommOp::kAllReduce].bytes_sent * n == 2 * 2 * (n - 1) * S);
  CHECK(s[CommOp::kAllReduce].bytes_received * n == 2 * 2 * (n - 1) * S);
  CHECK(s[CommOp::kReduceScatter].bytes_sent * n == (n - 1) * S);
  CHECK(s[CommOp::kAllReduce].seconds > 0);
  CHECK(s[CommOp::kSend].calls == 0);
  const std::string report = s.report();
  CHECK_THAT(report, Contains("all_reduce") && Contains("reduce_scatter"));
  comm.stats().reset();
  CHECK(comm.stats()[CommOp::kAllReduce].calls == 0);
}

TEST_CASE("split: groups by color, ordered by key") {
  Communicator& comm = test_world();
  const int n = comm.size(), r = comm.rank();
  INFO(where(comm));
  // Two groups, even and odd ranks, each ordered by descending world rank.
  auto sub = comm.split(r % 2, -r);
  const int members = (n + 1 - r % 2) / 2;
  CHECK(sub->size() == members);
  std::vector<std::int32_t> world_ranks(static_cast<std::size_t>(sub->size()), -1);
  std::int32_t mine = r;
  sub->all_gather(&mine, world_ranks.data(), world_ranks.size(), DataType::kInt32);
  for (int k = 0; k < sub->size(); ++k) {
    // Key -r: position k holds the k-th largest rank of this parity.
    const int largest = (n - 1) - ((n - 1) % 2 != r % 2 ? 1 : 0);
    CHECK(world_ranks[static_cast<std::size_t>(k)] == largest - 2 * k);
  }
  CHECK(comm.stats()[CommOp::kSplit].calls >= 1);
}

TEST_CASE("bad arguments are errors naming the rank, before any communication") {
  Communicator& comm = test_world();
  const int n = comm.size();
  float x = 0;
  CHECK_THROWS_WITH(comm.isend(&x, 1, DataType::kFloat32, n, 0),
                    Contains("peer " + std::to_string(n)) && Contains("is not a rank of this"));
  CHECK_THROWS_WITH(comm.irecv(&x, 1, DataType::kFloat32, -1, 0), Contains("peer -1"));
  CHECK_THROWS_WITH(comm.isend(&x, 1, DataType::kFloat32, 0, 40000), Contains("tag 40000"));
  CHECK_THROWS_WITH(comm.all_reduce(nullptr, &x, 1, DataType::kFloat32, ReduceOp::kSum), Contains("null buffer"));
  CHECK_THROWS_WITH(comm.broadcast(&x, 1, DataType::kFloat32, n), Contains("broadcast root"));
  CHECK_THROWS_WITH(comm.split(-1, 0), Contains("color must be >= 0"));
}
