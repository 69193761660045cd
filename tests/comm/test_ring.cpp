// Lab 04a: the hand-written ring collectives against the backend's built-in ones (MPI's on
// 2-4 ranks, the one-rank communicator's copies on one), and against the closed-form sums.
// Inputs are small integers held in floats, so every sum is exact whatever the order of the
// additions: the ring and the built-in must agree bit for bit (==), not within a tolerance.
// Counts include 1, 7 and 1000003 (not multiples of any rank count) and counts below the rank
// count (empty blocks); chunk sizes down to 12 bytes force many uneven pieces per block.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "comm/ring.hpp"
#include "compare.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {

// Rank r's input at position i: an integer below 2^24 / 4, so sums over 4 ranks stay exact in float.
template <typename T>
T input_value(int rank, std::size_t i) {
  return static_cast<T>((rank + 1) * static_cast<int>(i % 17) + rank);
}
// The sum over n ranks of input_value, in closed form.
template <typename T>
T sum_over_ranks(int n, std::size_t i) {
  return static_cast<T>(static_cast<int>(i % 17) * n * (n + 1) / 2 + n * (n - 1) / 2);
}

struct Case {
  std::size_t count;
  RingOptions options;
};

std::string describe(const Case& c) {
  return "count " + std::to_string(c.count) + ", chunk " + std::to_string(c.options.chunk_bytes) + " B, window " +
         std::to_string(c.options.window);
}

// Odd sizes with the default pieces, many tiny uneven pieces, and a window of one.
std::vector<Case> cases() {
  std::vector<Case> out;
  for (std::size_t count : {1, 2, 3, 4, 5, 7, 64, 1000}) {
    out.push_back({count, RingOptions{}});
    out.push_back({count, RingOptions{12, 1}});
    out.push_back({count, RingOptions{20, 3}});
  }
  out.push_back({1000003, RingOptions{}});
  out.push_back({1000003, RingOptions{40000, 2}});
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE("ring all-reduce equals the built-in all-reduce", "[graded][ring_all_reduce]", float, double,
                   std::int32_t) {
  Communicator& comm = test_world();
  const int n = comm.size(), r = comm.rank();
  for (const Case& c : cases()) {
    INFO(where(comm) << ", " << describe(c));
    std::vector<TestType> x(c.count), builtin(c.count), formula(c.count);
    for (std::size_t i = 0; i < c.count; ++i) {
      x[i] = input_value<TestType>(r, i);
      formula[i] = sum_over_ranks<TestType>(n, i);
    }
    comm.all_reduce(x.data(), builtin.data(), c.count, dtype_of<TestType>(), ReduceOp::kSum);
    ring_all_reduce(comm, x.data(), c.count, c.options);
    CHECK_MATCH(compare_bitwise("ring all-reduce vs built-in", x.data(), builtin.data(), c.count));
    CHECK_MATCH(compare_bitwise("ring all-reduce vs closed-form sum", x.data(), formula.data(), c.count));
  }
}

TEMPLATE_TEST_CASE("ring reduce-scatter leaves block r of the sum on rank r", "[graded][ring_reduce_scatter]", float,
                   std::int32_t) {
  Communicator& comm = test_world();
  const int n = comm.size(), r = comm.rank();
  for (const Case& c : cases()) {
    INFO(where(comm) << ", " << describe(c));
    const BlockPartition blocks{c.count, n};
    const std::size_t off = blocks.offset(r), len = blocks.size(r);
    std::vector<TestType> x(c.count), builtin(len), formula(len);
    for (std::size_t i = 0; i < c.count; ++i) x[i] = input_value<TestType>(r, i);
    for (std::size_t i = 0; i < len; ++i) formula[i] = sum_over_ranks<TestType>(n, off + i);
    comm.reduce_scatter(x.data(), builtin.data(), c.count, dtype_of<TestType>(), ReduceOp::kSum);
    ring_reduce_scatter(comm, x.data(), c.count, c.options);
    INFO("block " << r << ": elements [" << off << ", " << off + len << ")");
    CHECK_MATCH(compare_bitwise("ring reduce-scatter block vs built-in", x.data() + off, builtin.data(), len));
    CHECK_MATCH(compare_bitwise("ring reduce-scatter block vs closed-form sum", x.data() + off, formula.data(), len));
  }
}

TEMPLATE_TEST_CASE("ring all-gather fills every block from its owner", "[graded][ring_all_gather]", float,
                   std::int32_t) {
  Communicator& comm = test_world();
  const int n = comm.size(), r = comm.rank();
  for (const Case& c : cases()) {
    INFO(where(comm) << ", " << describe(c));
    const BlockPartition blocks{c.count, n};
    const std::size_t off = blocks.offset(r), len = blocks.size(r);
    // Block r holds the global index of each element; the rest holds a value the ring must overwrite.
    std::vector<TestType> x(c.count, static_cast<TestType>(-7)), builtin(c.count), formula(c.count);
    for (std::size_t i = 0; i < c.count; ++i) formula[i] = static_cast<TestType>(i);
    for (std::size_t i = off; i < off + len; ++i) x[i] = static_cast<TestType>(i);
    comm.all_gather(x.data() + off, builtin.data(), c.count, dtype_of<TestType>());
    ring_all_gather(comm, x.data(), c.count, c.options);
    CHECK_MATCH(compare_bitwise("ring all-gather vs built-in", x.data(), builtin.data(), c.count));
    CHECK_MATCH(compare_bitwise("ring all-gather vs global indices", x.data(), formula.data(), c.count));
  }
}

namespace {

struct Bytes {
  std::uint64_t sent, received, send_calls;
};

Bytes measure(Communicator& comm, void (*op)(Communicator&, float*, std::size_t, const RingOptions&),
              std::vector<float>& x, const RingOptions& options, CommOp ring_row) {
  comm.stats().reset();
  op(comm, x.data(), x.size(), options);
  const CommStats& s = comm.stats();
  // The ring's own row must agree with the point-to-point rows it is built from.
  CHECK(s[ring_row].calls == 1);
  CHECK(s[ring_row].bytes_sent == s[CommOp::kSend].bytes_sent);
  CHECK(s[ring_row].bytes_received == s[CommOp::kRecv].bytes_received);
  return {s[CommOp::kSend].bytes_sent, s[CommOp::kRecv].bytes_received, s[CommOp::kSend].calls};
}

// Messages a rank sends when it sends every block except `skipped`, cut into pieces of p elements.
std::uint64_t pieces_except(const BlockPartition& blocks, int skipped, std::size_t p) {
  std::uint64_t m = 0;
  for (int b = 0; b < blocks.parts; ++b)
    if (b != skipped) m += (blocks.size(b) + p - 1) / p;
  return m;
}

}  // namespace

TEST_CASE("ring bytes on the wire: 2(n-1)/n S for all-reduce, (n-1)/n S for its halves", "[graded][ring_bytes]") {
  Communicator& comm = test_world();
  const int n = comm.size(), r = comm.rank();
  const RingOptions options{4096, 4};
  const std::size_t piece = options.chunk_bytes / sizeof(float);
  for (std::size_t count : {std::size_t(1000) * static_cast<std::size_t>(n), std::size_t(1000003), std::size_t(7)}) {
    const std::uint64_t S = count * sizeof(float);
    const BlockPartition blocks{count, n};
    const int prev = (r - 1 + n) % n, next = (r + 1) % n;
    INFO(where(comm) << ", count " << count << ", S = " << S << " bytes");
    std::vector<float> x(count, 1.0f);

    const Bytes ar = measure(comm, ring_all_reduce<float>, x, options, CommOp::kRingAllReduce);
    const Bytes rs = measure(comm, ring_reduce_scatter<float>, x, options, CommOp::kRingReduceScatter);
    const Bytes ag = measure(comm, ring_all_gather<float>, x, options, CommOp::kRingAllGather);
    // Exactly: reduce-scatter sends every block but r and receives every block but r-1;
    // all-gather sends every block but r+1 and receives every block but r.
    const std::uint64_t e = sizeof(float);
    CHECK(rs.sent == (count - blocks.size(r)) * e);
    CHECK(rs.received == (count - blocks.size(prev)) * e);
    CHECK(ag.sent == (count - blocks.size(next)) * e);
    CHECK(ag.received == (count - blocks.size(r)) * e);
    CHECK(ar.sent == rs.sent + ag.sent);
    CHECK(ar.received == rs.received + ag.received);
    if (count % static_cast<std::size_t>(n) == 0) {  // the textbook formulas, exact in integers
      CHECK(ar.sent * n == 2 * (n - 1) * S);
      CHECK(ar.received * n == 2 * (n - 1) * S);
      CHECK(rs.sent * n == (n - 1) * S);
      CHECK(ag.sent * n == (n - 1) * S);
    }
    // Chunked: one message per piece of at most chunk_bytes.
    if (n > 1) {
      CHECK(rs.send_calls == pieces_except(blocks, r, piece));
      CHECK(ag.send_calls == pieces_except(blocks, next, piece));
    } else {
      CHECK(ar.send_calls == 0);
    }
    // Summed over ranks, every block crosses n-1 links per half, for any count.
    std::int64_t total[2] = {static_cast<std::int64_t>(ar.sent), static_cast<std::int64_t>(ar.received)};
    comm.all_reduce(total, 2);
    CHECK(total[0] == 2 * static_cast<std::int64_t>((n - 1) * S));
    CHECK(total[1] == 2 * static_cast<std::int64_t>((n - 1) * S));
  }
}
