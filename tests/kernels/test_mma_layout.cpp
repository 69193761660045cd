// The tensor-core fragment arithmetic of the register-resident flash attention
// (kernels/core/mma_layout.hpp, used by kernels/layers/attention_flash_mma.cu) against an
// emulation of the two instructions as the PTX ISA's tables describe them: ldmatrix.x4 (with and
// without .trans) and mma.m16n8k16 with fp32 accumulation. A warp's registers are emulated lane
// by lane; the tiles hold small integers, so every product is exact and compared bitwise with the
// plain matrix product. Every product form the attention kernels use is covered:
//   S = X Y^T  (q k^T, k q^T, v dout^T, dout v^T: A rows from X, B from a tile whose rows are n)
//   O = P Z    (P v, P^T dout, dS^T q, dS k: A from the accumulators of S, B from a tile whose rows
//              are k, loaded transposed)
#include <catch2/catch.hpp>

#include <array>
#include <string>
#include <vector>

#include "kernels/core/mma_layout.hpp"

namespace {

namespace mma = scalelab::cuda::mma;

using Pair = std::array<float, 2>;                         // a 32-bit register: two 16-bit elements, lo first
using Fragment = std::array<std::array<Pair, 4>, 32>;      // 4 registers of each of 32 lanes
using Accumulator = std::array<std::array<float, 4>, 32>;  // a 16x8 fp32 product, 4 per lane

// A row-major tile of `rows` x `cols` with row stride ld, holding small integers.
struct Tile {
  int rows, cols, ld;
  std::vector<float> v;
  Tile(int r, int c, int seed) : rows(r), cols(c), ld(c + 8), v(static_cast<std::size_t>(r) * ld) {
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + seed * 13) % 9) - 4);
  }
  float at(int r, int c) const { return v[static_cast<std::size_t>(r) * ld + c]; }
};

// ldmatrix.x4 (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): lane j supplies the start
// (row, col) of row j % 8 of matrix j / 8; each row is 8 consecutive 16-bit elements. Without
// .trans, register m of lane L gets matrix m's row L / 4, elements 2 (L % 4) and 2 (L % 4) + 1;
// with .trans, element L / 4 of its rows 2 (L % 4) and 2 (L % 4) + 1.
template <typename RowStart>
Fragment ldmatrix_x4(const Tile& t, int row0, int col0, RowStart row_start, bool trans) {
  std::array<mma::RowCol, 32> starts{};
  for (int lane = 0; lane < 32; ++lane) {
    const mma::RowCol s = row_start(lane);
    starts[lane] = {row0 + s.row, col0 + s.col};
  }
  Fragment f{};
  for (int lane = 0; lane < 32; ++lane)
    for (int m = 0; m < 4; ++m) {
      const int g = lane / 4, i = lane % 4;
      if (!trans) {
        const mma::RowCol row = starts[8 * m + g];
        f[lane][m] = {t.at(row.row, row.col + 2 * i), t.at(row.row, row.col + 2 * i + 1)};
      } else {
        const mma::RowCol r0 = starts[8 * m + 2 * i], r1 = starts[8 * m + 2 * i + 1];
        f[lane][m] = {t.at(r0.row, r0.col + g), t.at(r1.row, r1.col + g)};
      }
    }
  return f;
}

// mma.sync.m16n8k16.row.col.f32 (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
// type"): with g = lane / 4, i = lane % 4, A's elements a0..a7 of a lane are at rows g (a0, a1,
// a4, a5) and g + 8 (a2, a3, a6, a7), columns 2i + (j % 2) + 8 (j >= 4); B's b0..b3 at rows
// 2i + (j % 2) + 8 (j >= 2), column g; C's c0..c3 at rows g (c0, c1) and g + 8, columns 2i + (j % 2).
// Registers hold the elements in pairs: a[0] = {a0, a1}, a[1] = {a2, a3}, b[0] = {b0, b1}, ...
void mma_16x8x16(Accumulator& d, const std::array<Pair, 4> (&a)[32], const Pair (&b0)[32], const Pair (&b1)[32]) {
  float A[16][16] = {}, B[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, i = lane % 4;
    for (int j = 0; j < 8; ++j) {
      const int row = g + ((j / 2) % 2) * 8, col = 2 * i + j % 2 + (j >= 4 ? 8 : 0);
      A[row][col] = a[lane][j / 2][j % 2];
    }
    for (int j = 0; j < 4; ++j) B[2 * i + j % 2 + (j >= 2 ? 8 : 0)][g] = (j < 2 ? b0 : b1)[lane][j % 2];
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, i = lane % 4;
    for (int j = 0; j < 4; ++j) {
      const int row = g + (j >= 2 ? 8 : 0), col = 2 * i + j % 2;
      float sum = 0;
      for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
      d[lane][j] += sum;
    }
  }
}

// acc[n] (16 x 8 each) += A (16 x 16 per a[k]) B, B's fragments loaded pairwise for n0 = 16 n,
// k0 = 16 k: the loop of warp_product in attention_flash_mma.cu.
template <typename LoadB>
void warp_product(std::vector<Accumulator>& acc, const std::vector<Fragment>& a, LoadB load_b) {
  for (std::size_t k = 0; k < a.size(); ++k)
    for (std::size_t n = 0; n < acc.size() / 2; ++n) {
      const Fragment b = load_b(static_cast<int>(16 * n), static_cast<int>(16 * k));
      std::array<Pair, 4> af[32];
      Pair b0[32], b1[32], b2[32], b3[32];
      for (int lane = 0; lane < 32; ++lane) {
        af[lane] = a[k][lane];
        b0[lane] = b[lane][0], b1[lane] = b[lane][1], b2[lane] = b[lane][2], b3[lane] = b[lane][3];
      }
      mma_16x8x16(acc[2 * n], af, b0, b1);
      mma_16x8x16(acc[2 * n + 1], af, b2, b3);
    }
}

// Element (row, col) of a 16 x (8 acc.size()) product, read where accumulator_element says it is.
float element(const std::vector<Accumulator>& acc, int row, int col) {
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) {
      const mma::RowCol at = mma::accumulator_element(lane, e);
      if (at.row == row && at.col == col % 8) return acc[col / 8][lane][e];
    }
  FAIL("no lane holds element (" << row << ", " << col << ")");
  return 0;
}

TEST_CASE("the attention's fragment arithmetic multiplies as the PTX ISA's ldmatrix and mma define them",
          "[kernels][mma]") {
  for (int hs : {16, 32, 64, 128}) {
    INFO("head size " << hs);
    const Tile X(64, hs, 1), Y(64, hs, 2), Z(64, hs, 3);  // q, k and v tiles (64 rows each)
    for (int r0 = 0; r0 < 64; r0 += 16) {                 // each warp's 16 rows
      // S = X[r0..r0+16) Y^T: 16 x 64.
      std::vector<Fragment> xa(hs / 16);
      for (int k = 0; k < hs / 16; ++k) xa[k] = ldmatrix_x4(X, r0, 16 * k, mma::a_row_start, false);
      std::vector<Accumulator> s(64 / 8, Accumulator{});
      warp_product(s, xa, [&](int n0, int k0) { return ldmatrix_x4(Y, n0, k0, mma::b_row_start_n_rows, false); });
      int wrong = 0;
      for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 64; ++c) {
          float want = 0;
          for (int d = 0; d < hs; ++d) want += X.at(r0 + r, d) * Y.at(c, d);
          if (element(s, r, c) != want && wrong++ == 0)
            FAIL_CHECK("S = X Y^T at (" << r << ", " << c << "): " << element(s, r, c) << ", want " << want);
        }
      CHECK(wrong == 0);

      // O = S Z: S's accumulators turned into A fragments (a_register_source), Z's rows are k.
      std::vector<Fragment> sa(64 / 16);
      for (int k = 0; k < 64 / 16; ++k)
        for (int lane = 0; lane < 32; ++lane)
          for (int reg = 0; reg < 4; ++reg) {
            const mma::AccumulatorPair from = mma::a_register_source(reg);
            const Accumulator& half = s[2 * k + from.half];
            sa[k][lane][reg] = {half[lane][from.e], half[lane][from.e + 1]};
          }
      std::vector<Accumulator> o(hs / 8, Accumulator{});
      warp_product(o, sa, [&](int n0, int k0) { return ldmatrix_x4(Z, k0, n0, mma::b_row_start_k_rows, true); });
      for (int r = 0; r < 16; ++r)
        for (int c = 0; c < hs; ++c) {
          float want = 0;
          for (int k = 0; k < 64; ++k) want += element(s, r, k) * Z.at(k, c);
          if (element(o, r, c) != want && wrong++ == 0)
            FAIL_CHECK("O = S Z at (" << r << ", " << c << "): " << element(o, r, c) << ", want " << want);
        }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("every accumulator element of a lane is a distinct place of the 16 x 8 product", "[kernels][mma]") {
  std::vector<int> seen(16 * 8, 0);
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) {
      const mma::RowCol at = mma::accumulator_element(lane, e);
      REQUIRE(at.row >= 0);
      REQUIRE(at.row < 16);
      REQUIRE(at.col >= 0);
      REQUIRE(at.col < 8);
      ++seen[at.row * 8 + at.col];
    }
  for (int place = 0; place < 16 * 8; ++place) CHECK(seen[place] == 1);
}

}  // namespace
