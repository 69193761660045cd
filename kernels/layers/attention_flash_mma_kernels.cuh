// Flash attention with its tiles in registers (bf16/fp16, head sizes 16, 32, 64, 128): the
// kernels. attention_flash_mma.cu launches them on the GPU; tests/simt/test_flash_mma_emulated.cpp
// runs the same source on the CPU (tests/simt/ stands in for kernels/core/ptx.cuh), so nothing
// here may use a CUDA feature outside ptx.cuh that the emulation lacks (it has __syncthreads,
// __shfl_xor_sync and the builtin indices).
//
// attention_flash.cu's kernels write every tile product to shared memory (nvcuda::wmma hides
// which lane holds which element, so the softmax has to read them back from there); on one H200
// they ran slower than the naive attention that forms the whole (T,T) matrix. Here every warp
// keeps its 16 rows of a product in mma.sync accumulators, whose layout is documented
// (kernels/core/mma.cuh): the softmax works on those registers, and the probabilities become the
// next product's input without leaving them. Shared memory holds only the tiles of q, k, v,
// dout and out, filled with asynchronous copies while the previous tile is being multiplied.
//
// Block: 4 warps, 64 rows (16 a warp); the loop walks tiles of 64 columns. Per (batch row, head):
//   forward   block = 64 queries; key tiles up to the diagonal:
//               S = q k^T (16x64 a warp), m_new = max(m, rowmax S), P = 2^(S' - m_new),
//               l = l 2^(m - m_new) + rowsum P, O = O 2^(m - m_new) + P v
//             (S' = S scale log2 e: the exponentials are exp2, the hardware's, with the log2 e
//             folded into the scale); out = O / l, lse = (m + log2 l) ln 2, per query, fp32.
//   dk, dv    block = 64 keys; query tiles from the diagonal on: S^T = k q^T, dP^T = v dout^T,
//             P^T = 2^(S'^T - lse log2 e), dS^T = P^T (dP^T - D), dv += P^T dout, dk += dS^T q,
//             with D_t = dout_t . out_t formed per tile from the tiles of dout and out.
//   dq        block = 64 queries; key tiles up to the diagonal: S = q k^T, dP = dout v^T,
//             dS = P (dP - D), dq += dS k.
// dq gets its own kernel (recomputing S and dP) instead of FlashAttention-2's atomic adds into
// an fp32 buffer, so the gradients are the same bits on every run, as in attention_flash.cu.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/core/mma.cuh"
#include "kernels/core/mma_layout.hpp"
#include "kernels/core/ptx.cuh"
#include "kernels/layers/attention_flash.hpp"

namespace scalelab::cuda::flash_mma {

using mma::accumulator_element;
using mma::to_a_fragment;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::mma_16x8x16;

constexpr int kRows = kFlashTile;  // 64 rows a block: queries (forward, dq) or keys (dk, dv)
constexpr int kCols = kFlashTile;  // 64 columns a tile of the loop: keys, or queries (dk, dv)
constexpr int kWarps = 4;          // 16 rows each
constexpr int kThreadsPerBlock = 32 * kWarps;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A (64, HS) tile of F in shared memory. Rows are padded by 16 bytes: the 8 row addresses of an
// ldmatrix then start 4 banks apart and cover all 32 banks once, where unpadded rows of 128
// bytes (HS = 64) would all start in bank 0.
template <int HS>
struct Tile {
  static constexpr int kLd = HS + 8;          // row stride, in elements
  static constexpr int kElems = kRows * kLd;  // elements of one tile
  template <typename F>
  static constexpr std::size_t bytes(int tiles) {
    return sizeof(F) * static_cast<std::size_t>(tiles) * kElems;
  }
};

// All threads: rows [row0, row0 + 64) of one head's HS columns of src (rows `ld` apart) into the
// tile dst, as asynchronous 16-byte copies; rows at or past T are filled with zeros (a NaN from
// unwritten memory would survive a product with a zero probability). Not committed here.
template <int HS, typename F>
__device__ void load_tile_async(F* dst, const F* src, std::size_t ld, int row0, int T) {
  constexpr int kPieces = HS * static_cast<int>(sizeof(F)) / 16;  // 16-byte pieces a row
  constexpr int kPer = 16 / static_cast<int>(sizeof(F));
  for (int i = threadIdx.x; i < kRows * kPieces; i += kThreadsPerBlock) {
    const int r = i / kPieces, c = (i % kPieces) * kPer, t = row0 + r;
    const bool valid = t < T;
    ptx::cp_async_16(dst + r * Tile<HS>::kLd + c, src + static_cast<std::size_t>(valid ? t : 0) * ld + c, valid);
  }
}

// All threads: k and v of key tile kt (rows `ld` apart) into stage kt % 2 of the two-stage tiles
// Ks and Vs (the forward's and dq's loop over key tiles). Not committed here.
template <int HS, typename F>
__device__ void load_key_tile(F* Ks, F* Vs, const F* k, const F* v, std::size_t ld, int kt, int T) {
  const int stage = (kt & 1) * Tile<HS>::kElems;
  load_tile_async<HS>(Ks + stage, k, ld, kt * kCols, T);
  load_tile_async<HS>(Vs + stage, v, ld, kt * kCols, T);
}

// All threads, at the top of each turn of a kernel's tile loop (the two-stage pipeline): where
// there is a next tile (`more`), its copies go out first (load_next, into the other stage), then
// this turn's tile is waited for; when this returns it has landed for every thread's copies.
template <typename LoadNext>
__device__ __forceinline__ void next_turn(bool more, LoadNext load_next) {
  if (more) {
    load_next();
    cp_async_commit();
    cp_async_wait<1>();  // all but the copies just sent
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}

// Fragments of a warp's products from tiles in shared memory (ld = the tile's row stride); which
// row each lane addresses is in kernels/core/mma_layout.hpp (checked on the CPU by
// tests/kernels/test_mma_layout.cpp).
// A (16x16): rows [r0, r0 + 16) and columns [c0, c0 + 16) of a row-major tile.
template <typename F>
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const F* tile, int ld, int r0, int c0) {
  const mma::RowCol p = mma::a_row_start(threadIdx.x % 32);
  ptx::ldmatrix_x4(a, tile + (r0 + p.row) * ld + c0 + p.col);
}
// B of two neighbouring products (n0..n0+7 in b[0], b[1]; n0+8..n0+15 in b[2], b[3]), k0..k0+15,
// from a tile that stores B transposed: n along its rows (q k^T: keys are the tile's rows).
template <typename F>
__device__ __forceinline__ void load_b_rows_n(std::uint32_t (&b)[4], const F* tile, int ld, int n0, int k0) {
  const mma::RowCol p = mma::b_row_start_n_rows(threadIdx.x % 32);
  ptx::ldmatrix_x4(b, tile + (n0 + p.row) * ld + k0 + p.col);
}
// The same from a tile that stores B as it is: k along its rows (P v: keys are the tile's rows).
template <typename F>
__device__ __forceinline__ void load_b_rows_k(std::uint32_t (&b)[4], const F* tile, int ld, int k0, int n0) {
  const mma::RowCol p = mma::b_row_start_k_rows(threadIdx.x % 32);
  ptx::ldmatrix_x4_trans(b, tile + (k0 + p.row) * ld + n0 + p.col);
}

// acc (16 x 8 kN) += A (16 x 16 kK, fragments a[kK]) B, with B's fragments loaded pairwise by
// load_b(b, n0, k0) for n0 = 0, 16, .. and k0 = 0, 16, ...
template <typename F, int kK, int kN, typename LoadB>
__device__ __forceinline__ void warp_product(float (&acc)[kN][4], const std::uint32_t (&a)[kK][4], LoadB load_b) {
  static_assert(kN % 2 == 0, "B fragments come in pairs");
#pragma unroll
  for (int k = 0; k < kK; ++k)
#pragma unroll
    for (int n = 0; n < kN / 2; ++n) {
      std::uint32_t b[4];
      load_b(b, 16 * n, 16 * k);
      mma_16x8x16<F>(acc[2 * n], a[k], b[0], b[1]);
      mma_16x8x16<F>(acc[2 * n + 1], a[k], b[2], b[3]);
    }
}

// The A fragments (16 x 16 kK) of rows [r0, r0 + 16) of a tile, all its columns.
template <typename F, int kK>
__device__ __forceinline__ void load_a_rows(std::uint32_t (&a)[kK][4], const F* tile, int ld, int r0) {
#pragma unroll
  for (int k = 0; k < kK; ++k) load_a(a[k], tile, ld, r0, 16 * k);
}

// An fp32 accumulator (16 x 8 kN) rounded to F as A fragments (16 x 16 kN/2): its columns become
// the next product's k (P v, P^T dout, dS^T q, dS k).
template <typename F, int kN>
__device__ __forceinline__ void to_a_fragments(std::uint32_t (&a)[kN / 2][4], const float (&acc)[kN][4]) {
#pragma unroll
  for (int k = 0; k < kN / 2; ++k) to_a_fragment<F>(a[k], acc[2 * k], acc[2 * k + 1]);
}

template <int kN>
__device__ __forceinline__ void zero(float (&acc)[kN][4]) {
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
}

// Writes a warp's (16 x 8 kN) fp32 result to rows row0 + g and row0 + g + 8 of dst (rows `ld`
// apart) where they are below T, each row times its factor (scale[0] for row0 + g, scale[1] for
// row0 + g + 8): each lane stores its pairs as one 4-byte word.
template <typename F, int kN>
__device__ void store_rows(F* dst, std::size_t ld, int row0, int T, const float (&scale)[2],
                           const float (&acc)[kN][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, i = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int t = row0 + g + 8 * half;
    if (t >= T) continue;
    F* row = dst + static_cast<std::size_t>(t) * ld + 2 * i;
    const float f = scale[half];
#pragma unroll
    for (int n = 0; n < kN; ++n)
      *reinterpret_cast<std::uint32_t*>(row + 8 * n) = mma::pack2<F>(acc[n][2 * half] * f, acc[n][2 * half + 1] * f);
  }
}

// All threads, after the tiles of dout and out of 64 queries from q0 have landed: D_t = dout_t .
// out_t and the forward's lse (times log2 e) per query, into shared memory (0 past T, where
// every probability is masked anyway). Two threads a row, half the head each.
template <int HS, typename F>
__device__ void row_stats(float* D_s, float* lse_s, const F* dOs, const F* Os, const float* lse, int q0, int T) {
  constexpr int kLd = Tile<HS>::kLd;
  const int r = threadIdx.x / 2, d0 = (threadIdx.x % 2) * (HS / 2);
  float dot = 0.0f;
#pragma unroll 8
  for (int d = d0; d < d0 + HS / 2; ++d) dot += to_float(dOs[r * kLd + d]) * to_float(Os[r * kLd + d]);
  dot += __shfl_xor_sync(0xffffffffu, dot, 1);
  if (threadIdx.x % 2 == 0) {
    D_s[r] = dot;
    lse_s[r] = q0 + r < T ? lse[q0 + r] * kLog2e : 0.0f;
  }
}

// Where a block (batch row b, head h = blockIdx.y as b NH + h) reads and writes.
struct Head {
  std::size_t ld3;  // row stride of qkv and dqkv: 3C
  std::size_t qkv_offset, out_offset, lse_offset;
  __device__ Head(int T, int C, int NH, int hs) : ld3(3 * static_cast<std::size_t>(C)) {
    const std::size_t b = blockIdx.y / NH, h = blockIdx.y % NH;
    qkv_offset = b * T * ld3 + h * hs;
    out_offset = b * T * C + h * hs;
    lse_offset = (b * NH + h) * T;
  }
};

// ---------------------------------------------------------------------------------------------
// Forward. Grid (query tiles, B NH); the tiles with the most keys start first.
template <int HS, typename F>
__global__ void __launch_bounds__(kThreadsPerBlock)
    forward_kernel(F* out, float* lse, const F* qkv, int T, int C, int NH, float scale_log2) {
  constexpr int kLd = Tile<HS>::kLd, kE = Tile<HS>::kElems;
  unsigned char* smem = ptx::dynamic_shared_memory();
  F* Qs = reinterpret_cast<F*>(smem);
  F* Ks = Qs + kE;      // two stages: tile kt + 1 lands while tile kt is multiplied
  F* Vs = Ks + 2 * kE;  // two stages
  const Head at(T, C, NH, HS);
  const int qt = gridDim.x - 1 - blockIdx.x, q0 = qt * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, i = lane % 4;
  const F* q = qkv + at.qkv_offset;
  const F* k = q + C;
  const F* v = q + 2 * C;

  load_tile_async<HS>(Qs, q, at.ld3, q0, T);
  cp_async_commit();
  load_key_tile<HS>(Ks, Vs, k, v, at.ld3, 0, T);
  cp_async_commit();
  cp_async_wait<1>();  // q has landed (k and v of tile 0 may not have)
  __syncthreads();
  std::uint32_t qa[HS / 16][4];  // this warp's 16 queries, as A fragments, for every key tile
  load_a_rows<F>(qa, Qs, kLd, warp * kRows / kWarps);

  float o[HS / 8][4];  // O: 16 queries x HS, unnormalised
  zero(o);
  // Per query row of this lane (g and g + 8 of the warp's 16): the running maximum of S'
  // (every lane of a group holds the same), and this lane's share of the running sum (its 16
  // columns of each tile; the group's four shares are added at the end).
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const int t_row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

  for (int kt = 0; kt <= qt; ++kt) {
    next_turn(kt < qt, [&] { load_key_tile<HS>(Ks, Vs, k, v, at.ld3, kt + 1, T); });
    const F* Kt = Ks + (kt & 1) * kE;
    const F* Vt = Vs + (kt & 1) * kE;

    float s[kCols / 8][4];  // S = q k^T: 16 queries x 64 keys
    zero(s);
    warp_product<F>(s, qa, [&](std::uint32_t(&b)[4], int n0, int k0) { load_b_rows_n(b, Kt, kLd, n0, k0); });

    // Causal mask, on the diagonal tile only: below it every key precedes every query (and is
    // below T, since only the last tile can be partial and it is some query tile's diagonal).
    // Lane element (n, e) is query q0 + 16 warp + row, key kt 64 + 8n + column.
    if (kt == qt) {
#pragma unroll
      for (int n = 0; n < kCols / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const mma::RowCol place = accumulator_element(lane, e);
          if (kt * kCols + 8 * n + place.col > q0 + warp * 16 + place.row) s[n][e] = -INFINITY;
        }
    }
    // The online softmax. Every row keeps at least one key in every tile (the tile's first key
    // is at or before each of its queries), so m_new is finite and no exp2 sees inf - inf.
    float m_new[2] = {m_run[0], m_run[1]};
#pragma unroll
    for (int n = 0; n < kCols / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) m_new[e >> 1] = fmaxf(m_new[e >> 1], s[n][e] * scale_log2);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m_new[r] = fmaxf(m_new[r], __shfl_xor_sync(0xffffffffu, m_new[r], 1));  // the row's 4 lanes
      m_new[r] = fmaxf(m_new[r], __shfl_xor_sync(0xffffffffu, m_new[r], 2));
      const float alpha = exp2f(m_run[r] - m_new[r]);  // 0 on the first tile (m_run = -inf)
      l_run[r] *= alpha;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        o[n][2 * r] *= alpha;
        o[n][2 * r + 1] *= alpha;
      }
      m_run[r] = m_new[r];
    }
#pragma unroll
    for (int n = 0; n < kCols / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(fmaf(s[n][e], scale_log2, -m_run[e >> 1]));  // masked: 2^-inf = 0
        s[n][e] = p;
        l_run[e >> 1] += p;  // the sum of the fp32 p; the product below takes them rounded to F
      }

    std::uint32_t pa[kCols / 16][4];  // P as A fragments: 16 queries x 64 keys
    to_a_fragments<F>(pa, s);
    warp_product<F>(o, pa, [&](std::uint32_t(&b)[4], int n0, int k0) { load_b_rows_k(b, Vt, kLd, k0, n0); });
    __syncthreads();  // every warp is done with this stage before it is loaded again
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
  }
  // out = O / l; lse = (m + log2 l) ln 2, the natural log of the sum of exp(scale s).
  const float inv_l[2] = {1.0f / l_run[0], 1.0f / l_run[1]};
  store_rows<F>(out + at.out_offset, C, q0 + warp * 16, T, inv_l, o);
#pragma unroll
  for (int r = 0; r < 2; ++r)
    if (i == 0 && t_row[r] < T) lse[at.lse_offset + t_row[r]] = (m_run[r] + log2f(l_run[r])) * kLn2;
}

// ---------------------------------------------------------------------------------------------
// Backward, dk and dv. Grid (key tiles, B NH); key tile 0, which meets every query tile, first.
template <int HS, typename F>
__global__ void __launch_bounds__(kThreadsPerBlock)
    dkdv_kernel(F* dqkv, const F* dout, const F* qkv, const F* out, const float* lse, int T, int C, int NH, float scale,
                float scale_log2) {
  constexpr int kLd = Tile<HS>::kLd, kE = Tile<HS>::kElems;
  unsigned char* smem = ptx::dynamic_shared_memory();
  F* Ks = reinterpret_cast<F*>(smem);
  F* Vs = Ks + kE;
  F* Stages = Vs + kE;  // two stages of three tiles: q, dout, out of a query tile
  float* D_s = reinterpret_cast<float*>(Stages + 6 * kE);
  float* lse_s = D_s + kCols;
  const Head at(T, C, NH, HS);
  const int kt = blockIdx.x, k0 = kt * kRows, query_tiles = (T + kCols - 1) / kCols;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = warp * kRows / kWarps;  // this warp's first key of the tile
  const F* q = qkv + at.qkv_offset;
  const F* dO = dout + at.out_offset;
  const F* o = out + at.out_offset;
  const float* lse_bh = lse + at.lse_offset;
  const auto load_stage = [&](int qt) {
    F* st = Stages + ((qt - kt) & 1) * 3 * kE;
    load_tile_async<HS>(st, q, at.ld3, qt * kCols, T);
    load_tile_async<HS>(st + kE, dO, C, qt * kCols, T);
    load_tile_async<HS>(st + 2 * kE, o, C, qt * kCols, T);
  };

  load_tile_async<HS>(Ks, q + C, at.ld3, k0, T);
  load_tile_async<HS>(Vs, q + 2 * C, at.ld3, k0, T);
  load_stage(kt);
  cp_async_commit();
  float dk[HS / 8][4], dv[HS / 8][4];  // 16 keys x HS each
  zero(dk);
  zero(dv);
  for (int qt = kt; qt < query_tiles; ++qt) {
    next_turn(qt + 1 < query_tiles, [&] { load_stage(qt + 1); });  // k, v (first turn) and query tile qt
    const F* Qt = Stages + ((qt - kt) & 1) * 3 * kE;
    const F* dOt = Qt + kE;
    const int q0 = qt * kCols;
    row_stats<HS>(D_s, lse_s, dOt, Qt + 2 * kE, lse_bh, q0, T);
    __syncthreads();  // D and lse of the tile's queries are in shared memory

    float s[kCols / 8][4], dp[kCols / 8][4];  // S^T = k q^T, dP^T = v dout^T: 16 keys x 64 queries
    zero(s);
    zero(dp);
    {
      std::uint32_t ka[HS / 16][4];
      load_a_rows<F>(ka, Ks, kLd, r0);
      warp_product<F>(s, ka, [&](std::uint32_t(&b)[4], int n0, int k0_) { load_b_rows_n(b, Qt, kLd, n0, k0_); });
      load_a_rows<F>(ka, Vs, kLd, r0);
      warp_product<F>(dp, ka, [&](std::uint32_t(&b)[4], int n0, int k0_) { load_b_rows_n(b, dOt, kLd, n0, k0_); });
    }
    // Lane element (n, e): key u = k0 + r0 + row, query t = q0 + 8n + column.
    // P^T = 2^(S'^T - lse log2 e) where u <= t < T, else 0; dS^T = P^T (dP^T - D_t) (in dp).
#pragma unroll
    for (int n = 0; n < kCols / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const mma::RowCol place = accumulator_element(lane, e);
        const int tq = 8 * n + place.col, t = q0 + tq, u = k0 + r0 + place.row;
        const bool keep = u <= t && t < T;
        const float p = keep ? exp2f(fmaf(s[n][e], scale_log2, -lse_s[tq])) : 0.0f;
        dp[n][e] = keep ? p * (dp[n][e] - D_s[tq]) : 0.0f;
        s[n][e] = p;
      }
    {
      std::uint32_t a[kCols / 16][4];  // 16 keys x 64 queries
      to_a_fragments<F>(a, s);
      warp_product<F>(dv, a, [&](std::uint32_t(&b)[4], int n0, int k0_) { load_b_rows_k(b, dOt, kLd, k0_, n0); });
      to_a_fragments<F>(a, dp);
      warp_product<F>(dk, a, [&](std::uint32_t(&b)[4], int n0, int k0_) { load_b_rows_k(b, Qt, kLd, k0_, n0); });
    }
    __syncthreads();  // every warp is done with this stage, D and lse before they are refilled
  }
  F* dk_bh = dqkv + at.qkv_offset + C;
  const float dk_scale[2] = {scale, scale}, one[2] = {1.0f, 1.0f};
  store_rows<F>(dk_bh, at.ld3, k0 + r0, T, dk_scale, dk);  // dk = scale dS^T q
  store_rows<F>(dk_bh + C, at.ld3, k0 + r0, T, one, dv);
}

// ---------------------------------------------------------------------------------------------
// Backward, dq. Grid (query tiles, B NH); the tiles with the most keys first.
template <int HS, typename F>
__global__ void __launch_bounds__(kThreadsPerBlock)
    dq_kernel(F* dqkv, const F* dout, const F* qkv, const F* out, const float* lse, int T, int C, int NH, float scale,
              float scale_log2) {
  constexpr int kLd = Tile<HS>::kLd, kE = Tile<HS>::kElems;
  unsigned char* smem = ptx::dynamic_shared_memory();
  F* Qs = reinterpret_cast<F*>(smem);
  F* dOs = Qs + kE;
  F* Os = dOs + kE;
  F* Ks = Os + kE;      // two stages
  F* Vs = Ks + 2 * kE;  // two stages
  float* D_s = reinterpret_cast<float*>(Vs + 2 * kE);
  float* lse_s = D_s + kRows;
  const Head at(T, C, NH, HS);
  const int qt = gridDim.x - 1 - blockIdx.x, q0 = qt * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
  const int r0 = warp * kRows / kWarps;
  const F* q = qkv + at.qkv_offset;
  const F* k = q + C;
  const F* v = q + 2 * C;

  load_tile_async<HS>(Qs, q, at.ld3, q0, T);
  load_tile_async<HS>(dOs, dout + at.out_offset, C, q0, T);
  load_tile_async<HS>(Os, out + at.out_offset, C, q0, T);
  cp_async_commit();
  load_key_tile<HS>(Ks, Vs, k, v, at.ld3, 0, T);
  cp_async_commit();
  cp_async_wait<1>();  // q, dout, out have landed
  __syncthreads();
  row_stats<HS>(D_s, lse_s, dOs, Os, lse + at.lse_offset, q0, T);
  __syncthreads();
  std::uint32_t qa[HS / 16][4], da[HS / 16][4];  // this warp's 16 queries of q and dout
  load_a_rows<F>(qa, Qs, kLd, r0);
  load_a_rows<F>(da, dOs, kLd, r0);
  float D_row[2], lse_row[2];  // of this lane's queries r0 + g and r0 + g + 8
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    D_row[r] = D_s[r0 + g + 8 * r];
    lse_row[r] = lse_s[r0 + g + 8 * r];
  }
  const int t_row[2] = {q0 + r0 + g, q0 + r0 + g + 8};

  float dq[HS / 8][4];  // 16 queries x HS
  zero(dq);
  for (int kt = 0; kt <= qt; ++kt) {
    next_turn(kt < qt, [&] { load_key_tile<HS>(Ks, Vs, k, v, at.ld3, kt + 1, T); });
    const F* Kt = Ks + (kt & 1) * kE;
    const F* Vt = Vs + (kt & 1) * kE;
    float s[kCols / 8][4], dp[kCols / 8][4];  // S = q k^T, dP = dout v^T: 16 queries x 64 keys
    zero(s);
    zero(dp);
    warp_product<F>(s, qa, [&](std::uint32_t(&b)[4], int n0, int k0) { load_b_rows_n(b, Kt, kLd, n0, k0); });
    warp_product<F>(dp, da, [&](std::uint32_t(&b)[4], int n0, int k0) { load_b_rows_n(b, Vt, kLd, n0, k0); });
    // Lane element (n, e): query t_row[e / 2] (q0 + r0 + row), key kt 64 + 8n + column.
#pragma unroll
    for (int n = 0; n < kCols / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int u = kt * kCols + 8 * n + accumulator_element(lane, e).col, t = t_row[e >> 1];
        const bool keep = u <= t && t < T;
        const float p = keep ? exp2f(fmaf(s[n][e], scale_log2, -lse_row[e >> 1])) : 0.0f;
        dp[n][e] = keep ? p * (dp[n][e] - D_row[e >> 1]) : 0.0f;  // dS
      }
    std::uint32_t dsa[kCols / 16][4];  // dS as A fragments: 16 queries x 64 keys
    to_a_fragments<F>(dsa, dp);
    warp_product<F>(dq, dsa, [&](std::uint32_t(&b)[4], int n0, int k0) { load_b_rows_k(b, Kt, kLd, k0, n0); });
    __syncthreads();
  }
  const float dq_scale[2] = {scale, scale};
  store_rows<F>(dqkv + at.qkv_offset, at.ld3, q0 + r0, T, dq_scale, dq);  // dq = scale dS k
}

// Shared memory of each kernel: tiles of F, then (backward) D and lse of 64 queries in fp32.
template <int HS, typename F>
constexpr std::size_t forward_bytes() {
  return Tile<HS>::template bytes<F>(5);  // q; k, v in two stages
}
template <int HS, typename F>
constexpr std::size_t dkdv_bytes() {
  return Tile<HS>::template bytes<F>(8) + 2 * kCols * sizeof(float);  // k, v; (q, dout, out) x 2
}
template <int HS, typename F>
constexpr std::size_t dq_bytes() {
  return Tile<HS>::template bytes<F>(7) + 2 * kRows * sizeof(float);  // q, dout, out; (k, v) x 2
}

// ---------------------------------------------------------------------------------------------
// How the kernels are launched (attention_flash_mma.cu, and tests/simt/ on the CPU): a grid of
// (64-row tiles, B NH) blocks of kThreadsPerBlock threads, with the shared memory above.
inline dim3 grid(int B, int T, int NH) { return dim3((T + kRows - 1) / kRows, static_cast<unsigned>(B) * NH); }

// The scores' scale 1/sqrt(hs), and times log2 e for the exponentials (one rounding each, the
// same in forward and backward).
struct Scales {
  float scale, scale_log2;
};
template <int HS>
Scales scales() {
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  return {scale, kLog2e * scale};
}

// Calls fn.template operator()<HS>() for the compiled head size hs.
template <typename Fn>
void with_head_size(int hs, Fn fn) {
  switch (hs) {
    case 16: return fn.template operator()<16>();
    case 32: return fn.template operator()<32>();
    case 64: return fn.template operator()<64>();
    case 128: return fn.template operator()<128>();
    default: SCALELAB_CHECK(false, "attention: the register-resident flash kernels have no head size ", hs);
  }
}

}  // namespace scalelab::cuda::flash_mma
