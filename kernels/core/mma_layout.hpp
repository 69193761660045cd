// The index arithmetic of the tensor-core fragments (kernels/core/mma.cuh) as plain C++, so that
// the register-resident kernels (kernels/layers/attention_flash_mma.cu) and a CPU test
// (tests/kernels/test_mma_layout.cpp, which emulates ldmatrix and mma.sync as the PTX ISA's tables
// describe them) use the same functions: the test runs on every machine, with or without a GPU.
//
// A warp's 32 lanes: g = lane / 4 (its group, 0..7), i = lane % 4 (its place in the group).
#pragma once

#if defined(__CUDACC__)
#define SCALELAB_HOST_DEVICE __host__ __device__
#else
#define SCALELAB_HOST_DEVICE
#endif

namespace scalelab::cuda::mma {

struct RowCol {
  int row, col;
};

// Which element of a 16 x 16 block a lane passes to ldmatrix.x4 as the start of "its" row:
// lanes 8m..8m+7 address the 8 rows of matrix m, and register m of every lane receives matrix m.
// For an A fragment (16 x 16, row-major in the tile): matrix 0 = rows 0-7 / columns 0-7 -> a[0],
// 1 = rows 8-15 / columns 0-7 -> a[1], 2 = rows 0-7 / columns 8-15 -> a[2], 3 -> a[3].
SCALELAB_HOST_DEVICE constexpr RowCol a_row_start(int lane) {
  const int m = lane / 8;
  return {(m & 1) * 8 + lane % 8, (m >> 1) * 8};
}
// B fragments of two neighbouring 16 x 8 products from a tile whose rows are B's n (columns of
// the product) and columns B's k: matrix 0 = n 0-7 / k 0-7 -> b[0] of the first product, 1 = n 0-7 /
// k 8-15 -> its b[1], 2 and 3 the same for n 8-15 (the second product). Loaded without .trans.
SCALELAB_HOST_DEVICE constexpr RowCol b_row_start_n_rows(int lane) {
  const int m = lane / 8;
  return {(m >> 1) * 8 + lane % 8, (m & 1) * 8};
}
// The same from a tile whose rows are B's k and columns its n, loaded with .trans (each lane then
// receives a pair down a column): matrix 0 = k 0-7 / n 0-7 -> b[0], 1 = k 8-15 / n 0-7 -> b[1],
// 2 and 3 the same for n 8-15. That is the A fragment's order of the four 8x8 matrices (rows
// first, then columns), so the same addresses.
SCALELAB_HOST_DEVICE constexpr RowCol b_row_start_k_rows(int lane) { return a_row_start(lane); }

// Where accumulator element e (0..3) of a lane sits in its 16 x 8 product: rows g and g + 8,
// columns 2i and 2i + 1.
SCALELAB_HOST_DEVICE constexpr RowCol accumulator_element(int lane, int e) {
  return {lane / 4 + 8 * (e >> 1), 2 * (lane % 4) + (e & 1)};
}

// The A fragment (16 x 16) that two neighbouring accumulators (16 x 8 each: `left` = columns 0-7,
// `right` = 8-15) hold between them: register r of a lane is the pair of accumulator elements
// (e, e + 1) of the accumulator `half` (0 left, 1 right). Both hold rows g and g + 8 and columns
// 2i, 2i + 1 of their 8, which is exactly where A's registers want them.
struct AccumulatorPair {
  int half, e;
};
SCALELAB_HOST_DEVICE constexpr AccumulatorPair a_register_source(int r) { return {r >> 1, 2 * (r & 1)}; }

}  // namespace scalelab::cuda::mma
