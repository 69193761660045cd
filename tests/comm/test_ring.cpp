// Lab 04a (graded, tests/grading/lab04-collectives.json): the hand-written ring collectives
// against the backend's built-in ones (MPI's on 1-4 ranks, the one-rank communicator's copies in
// test_comm), against closed-form sums, and their bytes on the wire against the exact formulas.
// Inputs are small integers held in floats, so every sum is exact whatever the order of the
// additions: the ring and the built-in must agree bit for bit (==), not within a tolerance.
// Counts: 0, 1, n-1, n, n+1 for n ranks (empty and uneven blocks), primes (7, 13, 1009,
// 1000003: no rank count divides them) and a large one; pieces down to 12 bytes force many
// uneven pieces per block. The receives in flight are checked against the window. A failure
// names the rank, the case, the first wrong index, the value found and the value expected, and
// the largest difference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>
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

// Odd sizes for n ranks, each with the default pieces, many tiny uneven pieces and a window of
// one, plus a large prime count with the default and with mid-sized pieces.
std::vector<Case> cases(int n) {
  const std::size_t ranks = static_cast<std::size_t>(n);
  const std::set<std::size_t> counts = {0, 1, 2, 3, ranks - 1, ranks, ranks + 1, 7, 13, 64, 1000, 1009};
  std::vector<Case> out;
  for (std::size_t count : counts) {
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
  for (const Case& c : cases(n)) {
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
  for (const Case& c : cases(n)) {
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
  for (const Case& c : cases(n)) {
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

// What one ring collective moved, from the communicator's counters (stats(): the send and recv
// rows, which count every isend/irecv the ring posts, whoever wrote the ring).
struct Bytes {
  std::uint64_t sent, received, send_calls, peak_recvs;  // peak_recvs: the most receives in flight at once
};

Bytes measure(Communicator& comm, void (*op)(Communicator&, float*, std::size_t, const RingOptions&),
              std::vector<float>& x, const RingOptions& options) {
  comm.stats().reset();
  op(comm, x.data(), x.size(), options);
  const CommStats& s = comm.stats();
  return {s[CommOp::kSend].bytes_sent, s[CommOp::kRecv].bytes_received, s[CommOp::kSend].calls,
          s.peak_recvs_in_flight()};
}

// A counter against its formula; the message names the counter and says by how much it is off.
void check_counter(const std::string& what, std::uint64_t counted, std::uint64_t formula) {
  const std::uint64_t off = counted > formula ? counted - formula : formula - counted;
  INFO(what << ": counted " << counted << ", formula " << formula << " ("
            << (counted == formula
                    ? "equal"
                    : (counted > formula ? std::string("too many by ") : "too few by ") + std::to_string(off))
            << ")");
  CHECK(counted == formula);
}

// Messages a rank sends when it sends every block except `skipped`, cut into pieces of p elements.
std::uint64_t pieces_except(const BlockPartition& blocks, int skipped, std::size_t p) {
  std::uint64_t m = 0;
  for (int b = 0; b < blocks.parts; ++b)
    if (b != skipped) m += (blocks.size(b) + p - 1) / p;
  return m;
}

}  // namespace

// The exact formulas, for any count. Blocks differ by at most one element (BlockPartition), so
// "(n-1)/n S" is exact only when n divides the count; in general a rank sends every block except
// one and receives every block except one:
//   reduce-scatter  sends all blocks but its own (r), receives all but rank r-1's
//   all-gather      sends all blocks but r+1's (which r+1 owns), receives all but its own
//   all-reduce      the sum of the two
// Summed over the ring every block crosses n-1 links in each half: 2(n-1) S in all, exactly.
TEST_CASE("ring bytes on the wire: 2(n-1)/n S for all-reduce, (n-1)/n S for its halves", "[graded][ring_bytes]") {
  Communicator& comm = test_world();
  const int n = comm.size(), r = comm.rank();
  const RingOptions options{4096, 4};
  const std::size_t piece = options.chunk_bytes / sizeof(float);
  const std::size_t ranks = static_cast<std::size_t>(n);
  for (std::size_t count : {std::size_t(1000) * ranks, std::size_t(1000) * ranks + 1, std::size_t(1000003),
                            std::size_t(1009), std::size_t(7), ranks - 1, std::size_t(0)}) {
    const std::uint64_t S = count * sizeof(float), e = sizeof(float);
    const BlockPartition blocks{count, n};
    const int prev = (r - 1 + n) % n, next = (r + 1) % n;
    INFO(where(comm) << ", count " << count << ", S = " << S << " bytes, blocks of " << blocks.size(n - 1) << ".."
                     << blocks.size(0) << " elements");
    std::vector<float> x(count, 1.0f);

    const Bytes ar = measure(comm, ring_all_reduce<float>, x, options);
    const Bytes rs = measure(comm, ring_reduce_scatter<float>, x, options);
    const Bytes ag = measure(comm, ring_all_gather<float>, x, options);
    check_counter("reduce-scatter bytes sent = S - block r", rs.sent, (count - blocks.size(r)) * e);
    check_counter("reduce-scatter bytes received = S - block r-1", rs.received, (count - blocks.size(prev)) * e);
    check_counter("all-gather bytes sent = S - block r+1", ag.sent, (count - blocks.size(next)) * e);
    check_counter("all-gather bytes received = S - block r", ag.received, (count - blocks.size(r)) * e);
    check_counter("all-reduce bytes sent = reduce-scatter + all-gather", ar.sent, rs.sent + ag.sent);
    check_counter("all-reduce bytes received = reduce-scatter + all-gather", ar.received, rs.received + ag.received);
    if (count % ranks == 0) {  // the textbook formulas, exact in integers: compare n * bytes
      check_counter("n * all-reduce bytes sent = 2(n-1) S", ar.sent * ranks, 2 * (ranks - 1) * S);
      check_counter("n * all-reduce bytes received = 2(n-1) S", ar.received * ranks, 2 * (ranks - 1) * S);
      check_counter("n * reduce-scatter bytes sent = (n-1) S", rs.sent * ranks, (ranks - 1) * S);
      check_counter("n * all-gather bytes sent = (n-1) S", ag.sent * ranks, (ranks - 1) * S);
    }
    // Chunked (handout section 2): one message per piece of at most chunk_bytes, so each block
    // of b elements goes out as ceil(b / piece) messages; one rank sends nothing.
    check_counter("reduce-scatter messages sent", rs.send_calls, n > 1 ? pieces_except(blocks, r, piece) : 0);
    check_counter("all-gather messages sent", ag.send_calls, n > 1 ? pieces_except(blocks, next, piece) : 0);
    // The window (handout section 2): options.window receives posted ahead of the one being
    // added, fewer only when fewer pieces arrive. Counted at each irecv until its wait, so the
    // count does not depend on timing. Reduce-scatter receives every block but rank r-1's,
    // all-gather every block but its own; all-reduce is one after the other.
    const std::uint64_t w = static_cast<std::uint64_t>(options.window);
    const std::uint64_t rs_window = n > 1 ? std::min(w, pieces_except(blocks, prev, piece)) : 0;
    const std::uint64_t ag_window = n > 1 ? std::min(w, pieces_except(blocks, r, piece)) : 0;
    check_counter("reduce-scatter receives in flight at most = min(window, pieces received)", rs.peak_recvs, rs_window);
    check_counter("all-gather receives in flight at most = min(window, pieces received)", ag.peak_recvs, ag_window);
    check_counter("all-reduce receives in flight at most", ar.peak_recvs, std::max(rs_window, ag_window));
    // Summed over ranks, every block crosses n-1 links per half, for any count.
    std::int64_t total[2] = {static_cast<std::int64_t>(ar.sent), static_cast<std::int64_t>(ar.received)};
    comm.all_reduce(total, 2);
    check_counter("all-reduce bytes sent, all ranks = 2(n-1) S", static_cast<std::uint64_t>(total[0]),
                  2 * (ranks - 1) * S);
    check_counter("all-reduce bytes received, all ranks = 2(n-1) S", static_cast<std::uint64_t>(total[1]),
                  2 * (ranks - 1) * S);
  }
}

// Not graded (RingScope is not the student's code): each ring collective counts itself once in
// its own stats row, with the bytes of the sends and receives it is built from.
TEST_CASE("ring collectives count themselves in their own stats row", "[ring_stats]") {
  Communicator& comm = test_world();
  INFO(where(comm));
  std::vector<float> x(1009, 1.0f);
  const RingOptions options{256, 2};
  using RingOp = void (*)(Communicator&, float*, std::size_t, const RingOptions&);
  const std::pair<RingOp, CommOp> ops[] = {{ring_all_reduce<float>, CommOp::kRingAllReduce},
                                           {ring_reduce_scatter<float>, CommOp::kRingReduceScatter},
                                           {ring_all_gather<float>, CommOp::kRingAllGather}};
  for (const auto& [op, row] : ops) {
    comm.stats().reset();
    op(comm, x.data(), x.size(), options);
    const CommStats& s = comm.stats();
    INFO(comm_op_name(row));
    CHECK(s[row].calls == 1);
    CHECK(s[row].bytes_sent == s[CommOp::kSend].bytes_sent);
    CHECK(s[row].bytes_received == s[CommOp::kRecv].bytes_received);
  }
}
