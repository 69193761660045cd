// The CPU emulation of CUDA (tests/simt/simt.hpp) on small kernels whose results are known:
// each meeting point (__syncthreads, __shfl_xor_sync, ldmatrix, mma.sync, cp.async) gives what
// the PTX ISA says, and each mistake the emulation promises to catch is caught with its message
// (a barrier or warp instruction not every thread reaches, a tile read before its copy was waited
// for, operands outside shared memory). tests/simt/test_flash_mma_emulated.cpp then trusts it
// with the flash attention's kernels.
#include "simt.hpp"  // first: it defines CUDA's keywords for the host compiler

#include <catch2/catch.hpp>

#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/core/mma_layout.hpp"
#include "kernels/core/ptx.cuh"

namespace {

namespace simt = scalelab::simt;
namespace ptx = scalelab::cuda::ptx;
namespace mma = scalelab::cuda::mma;
using Catch::Matchers::Contains;

static_assert(ptx::kEmulated, "the include path must put tests/simt/include before the project's kernels/");

std::uint16_t bf16_bits(float f) {  // f exactly representable in bf16 (small integers here)
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>(u >> 16);
}

TEST_CASE("simt: threads meet at __syncthreads and see each other's shared-memory writes", "[simt]") {
  constexpr int kThreads = 96;
  std::vector<int> got(2 * kThreads, -1);
  simt::launch(dim3(2), dim3(kThreads), kThreads * sizeof(int), [&] {
    int* s = reinterpret_cast<int*>(ptx::dynamic_shared_memory());
    const int t = static_cast<int>(threadIdx.x), b = static_cast<int>(blockIdx.x);
    s[t] = 1000 * b + t;
    __syncthreads();
    got[b * kThreads + t] = s[(t + 1) % kThreads];  // written by another thread, maybe another warp
  });
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < kThreads; ++t) REQUIRE(got[b * kThreads + t] == 1000 * b + (t + 1) % kThreads);
}

TEST_CASE("simt: __shfl_xor_sync exchanges within each warp", "[simt]") {
  std::vector<float> got(64);
  simt::launch(dim3(1), dim3(64), 0, [&] {
    const int t = static_cast<int>(threadIdx.x);
    got[t] = __shfl_xor_sync(0xffffffffu, static_cast<float>(t), 5);
  });
  for (int t = 0; t < 64; ++t) REQUIRE(got[t] == static_cast<float>(t ^ 5));  // never across warps
}

TEST_CASE("simt: a lane sees another lane's shared-memory write after __syncwarp, and under some order not before",
          "[simt]") {
  // Each lane writes its word, then reads the word of the lane below it. The lanes of a warp run
  // one after another between meeting points: lowest first, lane k - 1 has written before lane k
  // reads; under kLastWarpAhead (highest first) lane k reads first and finds the NaN shared
  // memory starts as. With __syncwarp every order reads the writes.
  for (const bool sync : {true, false})
    for (const simt::Schedule schedule : simt::kAllSchedules) {
      std::vector<float> got(32, 0.0f);
      simt::launch(
          dim3(1), dim3(32), 32 * sizeof(float),
          [&] {
            float* s = reinterpret_cast<float*>(ptx::dynamic_shared_memory());
            const int t = static_cast<int>(threadIdx.x);
            s[t] = static_cast<float>(t);
            if (sync) __syncwarp();
            got[t] = t > 0 ? s[t - 1] : 0.0f;
          },
          schedule);
      const auto unwritten = std::count_if(got.begin(), got.end(), [](float v) { return std::isnan(v); });
      INFO((sync ? "with" : "without") << " __syncwarp, " << simt::schedule_name(schedule));
      REQUIRE(unwritten == (!sync && schedule == simt::Schedule::kLastWarpAhead ? 31 : 0));
    }
}

TEST_CASE("simt: ldmatrix and mma.sync multiply a 16x16 by a 16x8 tile exactly", "[simt]") {
  // A (16 x 16) and B^T (8 x 16: B's columns as rows, the q k^T layout) of small integers in
  // bf16, every product exact; D = A B by one warp, against the plain product.
  constexpr int kLd = 24;  // row stride in elements (48 bytes: rows stay 16-byte aligned)
  float A[16][16], Bt[8][16];
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k) A[r][k] = static_cast<float>((r * 7 + k * 3) % 9 - 4);
  for (int n = 0; n < 8; ++n)
    for (int k = 0; k < 16; ++k) Bt[n][k] = static_cast<float>((n * 5 + k * 2) % 7 - 3);
  std::vector<float> D(16 * 8, NAN);
  simt::launch(dim3(1), dim3(32), 2 * (16 + 16) * kLd, [&] {
    auto* s = reinterpret_cast<std::uint16_t*>(ptx::dynamic_shared_memory());
    std::uint16_t *sa = s, *sb = s + 16 * kLd;
    const int lane = static_cast<int>(threadIdx.x);
    if (lane == 0) {
      for (int r = 0; r < 16; ++r)
        for (int k = 0; k < 16; ++k) sa[r * kLd + k] = bf16_bits(A[r][k]);
      for (int n = 0; n < 16; ++n)  // rows 8-15 of the B tile: a second product's, zero
        for (int k = 0; k < 16; ++k) sb[n * kLd + k] = n < 8 ? bf16_bits(Bt[n][k]) : 0;
    }
    __syncthreads();
    std::uint32_t a[4], b[4];
    const mma::RowCol pa = mma::a_row_start(lane), pb = mma::b_row_start_n_rows(lane);
    ptx::ldmatrix_x4(a, sa + pa.row * kLd + pa.col);
    ptx::ldmatrix_x4(b, sb + pb.row * kLd + pb.col);
    float d[4] = {0, 0, 0, 0};
    ptx::mma_16x8x16<scalelab::cuda::bf16>(d, a, b[0], b[1]);
    for (int e = 0; e < 4; ++e) {
      const mma::RowCol at = mma::accumulator_element(lane, e);
      D[at.row * 8 + at.col] = d[e];
    }
  });
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      float want = 0;
      for (int k = 0; k < 16; ++k) want += A[r][k] * Bt[n][k];
      INFO("D[" << r << "][" << n << "]");
      REQUIRE(D[r * 8 + n] == want);
    }
}

TEST_CASE("simt: ldmatrix counts the shared-memory wavefronts its row addresses need", "[simt]") {
  // Rows of a 16 x 16 tile (16-bit elements) `ld` elements apart: 64 elements (128 bytes, every
  // row starting in bank 0) puts the 8 rows of each matrix in the same 4 banks, 8 wavefronts a
  // matrix; 72 (144 bytes, the flash kernels' padding) spreads them over all 32 banks, one each.
  const auto wavefronts = [](int ld) {
    return simt::launch(dim3(1), dim3(32), 2 * 16 * ld, [ld] {
      const auto* tile = reinterpret_cast<const std::uint16_t*>(ptx::dynamic_shared_memory());
      const mma::RowCol p = mma::a_row_start(static_cast<int>(threadIdx.x));
      std::uint32_t r[4];
      ptx::ldmatrix_x4(r, tile + p.row * ld + p.col);
    });
  };
  const simt::LaunchStats unpadded = wavefronts(64), padded = wavefronts(72);
  CHECK(unpadded.warp_instructions == 1);
  CHECK(unpadded.shared_wavefronts_min == 4);
  CHECK(unpadded.shared_wavefronts == 32);
  CHECK(padded.shared_wavefronts == 4);
}

TEST_CASE("simt: cp.async data is there after its wait, and NaN before it", "[simt]") {
  std::vector<float> src(32 * 4);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  std::vector<float> before(src.size()), after(src.size());
  simt::launch(dim3(1), dim3(32), src.size() * sizeof(float), [&] {
    float* s = reinterpret_cast<float*>(ptx::dynamic_shared_memory());
    const int t = static_cast<int>(threadIdx.x);
    ptx::cp_async_16(s + 4 * t, src.data() + 4 * t, /*valid=*/t % 2 == 0);  // odd threads: zeros
    ptx::cp_async_commit();
    for (int e = 0; e < 4; ++e) before[4 * t + e] = s[4 * t + e];  // a read before the wait
    ptx::cp_async_wait<0>();
    for (int e = 0; e < 4; ++e) after[4 * t + e] = s[4 * t + e];
  });
  for (std::size_t i = 0; i < src.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::isnan(before[i]));
    REQUIRE(after[i] == ((i / 4) % 2 == 0 ? src[i] : 0.0f));
  }
}

TEST_CASE("simt: cp.async waits for all but the newest groups", "[simt]") {
  alignas(16) float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  float first = 0, second = 0;
  simt::launch(dim3(1), dim3(32), 32, [&] {
    float* s = reinterpret_cast<float*>(ptx::dynamic_shared_memory());
    if (threadIdx.x != 0) return;
    ptx::cp_async_16(s, a, true);
    ptx::cp_async_commit();
    ptx::cp_async_16(s + 4, b, true);
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();  // the first group has landed, the second may not have
    first = s[0];
    second = s[4];
  });
  REQUIRE(first == 1.0f);
  REQUIRE(std::isnan(second));
}

TEST_CASE("simt: the blocks of a cluster meet at cluster.sync and read each other's shared memory", "[simt]") {
  // Grid of 4 blocks in clusters of 2: block b writes b + 1 into its shared memory; after the
  // cluster's sync, rank 0 reads its partner's through map_shared_rank.
  std::vector<float> got(4, -1.0f);
  const auto kernel = [&](bool sync_before_end) {
    return [&got, sync_before_end] {
      float* s = reinterpret_cast<float*>(ptx::dynamic_shared_memory());
      cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
      if (threadIdx.x == 0) s[0] = static_cast<float>(blockIdx.x + 1);
      cluster.sync();
      if (threadIdx.x == 0 && cluster.block_rank() == 0) got[blockIdx.x] = *cluster.map_shared_rank(s, 1);
      if (sync_before_end) cluster.sync();  // the partner's shared memory must outlive the read
    };
  };
  simt::launch(dim3(4), dim3(32), sizeof(float), kernel(true), simt::Schedule::kRoundRobin, dim3(2));
  CHECK(got[0] == 2.0f);  // block 1's value, read by block 0
  CHECK(got[2] == 4.0f);
  CHECK(got[1] == -1.0f);  // rank 1 reads nothing
  // Without the last sync, rank 1 may end before rank 0 reads its shared memory: kLastWarpAhead
  // (block 1's warp is the last warp of the cluster) runs it to its end first.
  std::fill(got.begin(), got.end(), -1.0f);
  simt::launch(dim3(4), dim3(32), sizeof(float), kernel(false), simt::Schedule::kLastWarpAhead, dim3(2));
  CHECK(std::isnan(got[0]));  // block 1 had ended: its shared memory is gone
  REQUIRE_THROWS_WITH(simt::launch(
                          dim3(3), dim3(32), 0, [] {}, simt::Schedule::kRoundRobin, dim3(2)),
                      Contains("not a whole number of clusters"));
}

TEST_CASE("simt: the mistakes a GPU would hang on or read garbage from are errors", "[simt]") {
  SECTION("a __syncthreads that some threads never reach") {
    const auto kernel = [] {
      if (threadIdx.x < 32) return;
      __syncthreads();
    };
    REQUIRE_THROWS_WITH(simt::launch(dim3(1), dim3(64), 0, kernel), Contains("is stuck") &&
                                                                        Contains("threads 0-31 at the kernel's end") &&
                                                                        Contains("threads 32-63 at __syncthreads"));
  }
  SECTION("a warp whose lanes reach different warp instructions") {
    const auto kernel = [] {
      std::uint32_t r[4];
      if (threadIdx.x < 16)
        (void)__shfl_xor_sync(0xffffffffu, 1.0f, 1);
      else
        ptx::ldmatrix_x4(r, ptx::dynamic_shared_memory());
    };
    REQUIRE_THROWS_WITH(simt::launch(dim3(1), dim3(32), 256, kernel), Contains("thread (16,0,0)") &&
                                                                          Contains("reached ldmatrix") &&
                                                                          Contains("wait at __shfl_xor_sync"));
  }
  SECTION("ldmatrix rows outside shared memory") {
    std::vector<std::uint16_t> global(32 * 8);
    const auto kernel = [&] {
      std::uint32_t r[4];
      ptx::ldmatrix_x4(r, global.data() + 8 * threadIdx.x);
    };
    REQUIRE_THROWS_WITH(simt::launch(dim3(1), dim3(32), 0, kernel), Contains("outside the block's shared memory"));
  }
  SECTION("a cp.async past the end of shared memory") {
    alignas(16) float src[4] = {};
    const auto kernel = [&] { ptx::cp_async_16(ptx::dynamic_shared_memory() + 16, src, true); };
    REQUIRE_THROWS_WITH(simt::launch(dim3(1), dim3(32), 16, kernel), Contains("not inside the block's shared memory"));
  }
  SECTION("a block that is not whole warps") {
    REQUIRE_THROWS_WITH(simt::launch(dim3(1), dim3(48), 0, [] {}), Contains("a multiple of 32"));
  }
  SECTION("an exception in one thread names the block and the thread") {
    const auto kernel = [] {
      if (blockIdx.x == 1 && threadIdx.x == 7) simt::fail("boom");
    };
    REQUIRE_THROWS_WITH(simt::launch(dim3(2), dim3(32), 0, kernel), Contains("block (1,0,0) thread (7,0,0): boom"));
  }
}

}  // namespace
