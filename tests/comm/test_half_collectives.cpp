// The 16-bit float types of the Communicator (bf16 and fp16, stored as uint16_t bits), on its
// backend (one rank: local; 1-4 ranks: MPI). Two things are checked:
//   - the local reduction rounds every sum to the nearest value, ties to even, saturating to
//     infinity and keeping NaN, against hand-picked bit patterns and against stage 03's own
//     conversions (precision/half.hpp, an independent implementation) on 100,000 random pairs;
//   - every collective moves and adds them: values that are small integers add exactly in both
//     formats, so the closed-form sums over ranks are the expected bits; a sum whose every hop
//     rounds (the same value on every rank, so the order of the hops does not matter) equals
//     the sequential fold rounded after each addition.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "compare.hpp"
#include "precision/half.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {

std::uint16_t to_half(float x, DataType t) { return t == DataType::kBFloat16 ? float_to_bf16(x) : float_to_fp16(x); }
float from_half(std::uint16_t h, DataType t) { return t == DataType::kBFloat16 ? bf16_to_float(h) : fp16_to_float(h); }

std::uint16_t reduced(std::uint16_t a, std::uint16_t b, DataType t, ReduceOp op = ReduceOp::kSum) {
  reduce_host(&a, &b, 1, t, op);
  return a;
}

// Rank r's value at i: a small integer, so that every partial sum over up to 4 ranks (at most
// 118) is exact in bf16 (8 significant bits: integers to 256) and in fp16 (to 2048).
float value(int r, std::size_t i) { return static_cast<float>((r + 1) * static_cast<int>(i % 11) + 3 * r); }
float sum_of(int n, std::size_t i) {
  return static_cast<float>(static_cast<int>(i % 11) * n * (n + 1) / 2 + 3 * n * (n - 1) / 2);
}

std::vector<std::uint16_t> halves(std::size_t count, DataType t, float (*f)(int, std::size_t), int r) {
  std::vector<std::uint16_t> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = to_half(f(r, i), t);
  return out;
}

const std::size_t kCounts[] = {0, 1, 7, 1000, 100003};
const DataType kHalfTypes[] = {DataType::kBFloat16, DataType::kFloat16};

}  // namespace

TEST_CASE("16-bit types: size, name, and the local reduction's rounding") {
  CHECK(dtype_size(DataType::kBFloat16) == 2);
  CHECK(dtype_size(DataType::kFloat16) == 2);
  CHECK(std::string(dtype_name(DataType::kBFloat16)) == "bfloat16");
  CHECK(std::string(dtype_name(DataType::kFloat16)) == "half");
  const DataType bf = DataType::kBFloat16, fp = DataType::kFloat16;
  // 1 + 2^-8 is halfway between bf16's 1 and 1 + 2^-7: ties go to the even significand.
  CHECK(reduced(0x3f80, 0x3b80, bf) == 0x3f80);  // 1 + 2^-8 -> 1
  CHECK(reduced(0x3f81, 0x3b80, bf) == 0x3f82);  // (1 + 2^-7) + 2^-8 -> 1 + 2^-6
  CHECK(reduced(0x3c00, 0x1000, fp) == 0x3c00);  // fp16: 1 + 2^-11 -> 1
  CHECK(reduced(0x3c01, 0x1000, fp) == 0x3c02);  // (1 + 2^-10) + 2^-11 -> 1 + 2^-9
  // Overflow saturates to infinity; NaN stays NaN; max and min compare the values.
  CHECK(reduced(0x7bff, 0x4c00, fp) == 0x7c00);  // 65504 + 16 -> inf
  CHECK(reduced(0x7f7f, 0x7f7f, bf) == 0x7f80);  // bf16's largest finite, doubled -> inf
  CHECK(std::isnan(from_half(reduced(0x7fc1, 0x3f80, bf), bf)));
  CHECK(std::isnan(from_half(reduced(0x7e01, 0x3c00, fp), fp)));
  CHECK(reduced(0xbf80, 0x3f80, bf, ReduceOp::kMax) == 0x3f80);  // max(-1, 1)
  CHECK(reduced(0xbc00, 0x3c00, fp, ReduceOp::kMin) == 0xbc00);  // min(-1, 1)

  // Against stage 03's conversions: round(widen(a) + widen(b)), on random pairs of every
  // magnitude (both signs, subnormals and overflow included).
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> exponent(-30, 20);
  std::normal_distribution<float> mantissa(0.0f, 1.0f);
  for (DataType t : kHalfTypes) {
    INFO(dtype_name(t));
    std::vector<std::uint16_t> a(100000), b(a.size()), want(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      a[i] = to_half(std::ldexp(mantissa(rng), exponent(rng)), t);
      b[i] = to_half(std::ldexp(mantissa(rng), exponent(rng)), t);
      want[i] = to_half(from_half(a[i], t) + from_half(b[i], t), t);
    }
    reduce_host(a.data(), b.data(), a.size(), t, ReduceOp::kSum);
    CHECK_MATCH(compare_bitwise(std::string("reduce_host sum in ") + dtype_name(t), a.data(), want.data(), a.size()));
  }
}

TEST_CASE("16-bit types: all-reduce, reduce-scatter and all-gather add and move the bits") {
  Communicator& comm = test_world();
  const int n = comm.size(), r = comm.rank();
  for (DataType t : kHalfTypes) {
    for (std::size_t count : kCounts) {
      INFO(where(comm) << ", " << dtype_name(t) << ", count " << count);
      const std::vector<std::uint16_t> x = halves(count, t, value, r);
      const std::vector<std::uint16_t> want = halves(
          count, t, [](int ranks, std::size_t i) { return sum_of(ranks, i); }, n);
      std::vector<std::uint16_t> out(count), inplace = x;
      comm.all_reduce(x.data(), out.data(), count, t, ReduceOp::kSum);
      CHECK_MATCH(compare_bitwise("all_reduce sum", out.data(), want.data(), count));
      Request q = comm.iall_reduce(inplace.data(), inplace.data(), count, t, ReduceOp::kSum);
      comm.wait(q);
      CHECK_MATCH(compare_bitwise("iall_reduce in place", inplace.data(), want.data(), count));
      const std::vector<std::uint16_t> top = halves(count, t, value, n - 1);
      comm.all_reduce(x.data(), out.data(), count, t, ReduceOp::kMax);
      CHECK_MATCH(compare_bitwise("all_reduce max", out.data(), top.data(), count));

      const BlockPartition p = comm.partition(count);
      const std::size_t off = p.offset(r), len = p.size(r);
      std::vector<std::uint16_t> block(len);
      comm.reduce_scatter(x.data(), block.data(), count, t, ReduceOp::kSum);
      CHECK_MATCH(compare_bitwise("reduce_scatter", block.data(), want.data() + off, len));
      std::vector<std::uint16_t> gathered(count, 0xffff);
      comm.all_gather(want.data() + off, gathered.data(), count, t);
      CHECK_MATCH(compare_bitwise("all_gather", gathered.data(), want.data(), count));

      // The uneven forms ZeRO uses: the pieces of [count/3, count) that each rank's block covers.
      const std::size_t begin = count / 3;
      const Pieces pieces = Pieces::of_range(p, begin, count);
      std::vector<std::uint16_t> piece(pieces.size(r));
      comm.reduce_scatter_v(x.data() + begin, piece.data(), pieces, t, ReduceOp::kSum);
      CHECK_MATCH(
          compare_bitwise("reduce_scatter_v", piece.data(), want.data() + begin + pieces.offset(r), piece.size()));
      std::vector<std::uint16_t> all(pieces.count(), 0xffff);
      comm.all_gather_v(piece.data(), all.data(), pieces, t);
      CHECK_MATCH(compare_bitwise("all_gather_v", all.data(), want.data() + begin, all.size()));
    }
  }
  // The counters count 2 bytes an element.
  const std::uint64_t before = comm.stats()[CommOp::kBroadcast].bytes_sent;
  std::vector<std::uint16_t> b(1000, r == 0 ? 0x3f80 : 0);
  comm.broadcast(b.data(), b.size(), DataType::kBFloat16, 0);
  CHECK(b[999] == 0x3f80);
  if (n > 1 && r == 0) CHECK(comm.stats()[CommOp::kBroadcast].bytes_sent - before > 0);
}

TEST_CASE("16-bit types: a sum over ranks rounds at every hop, as the sequential fold does") {
  Communicator& comm = test_world();
  const int n = comm.size();
  // The same value on every rank: any order of the n - 1 additions gives the same bits.
  for (DataType t : kHalfTypes) {
    INFO(where(comm) << ", " << dtype_name(t));
    const std::uint16_t a = t == DataType::kBFloat16 ? 0x3f81 : 0x3c01;  // 1 + one unit in the last place
    std::uint16_t want = a;
    for (int k = 1; k < n; ++k) want = to_half(from_half(want, t) + from_half(a, t), t);
    std::vector<std::uint16_t> x(301, a);
    comm.all_reduce(x.data(), x.data(), x.size(), t, ReduceOp::kSum);
    const std::vector<std::uint16_t> expect(x.size(), want);
    CHECK_MATCH(compare_bitwise("all_reduce of equal values", x.data(), expect.data(), x.size()));
  }
}
