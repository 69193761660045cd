// Flash attention's three kernels (forward; backward's dk/dv and dq), written around one
// primitive: a warp multiplies a 16-row tile by a tile of K (qk^T) or of V (P v) held in shared
// memory, into fp32 in shared memory (warp_gemm). Each of the 4 warps of a block owns 16 rows of
// the block's 64, so after the block has loaded a tile of keys (or queries) the warps work
// without further block-wide barriers. Line by line this is the CPU twin's loop
// (reference/model/layers/attention_flash.cpp) with its BLAS tile products replaced by warp_gemm.
#include <mma.h>

#include <cmath>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/attention_flash.hpp"

namespace scalelab::cuda {

namespace {

constexpr int kTile = kFlashTile;  // 64 rows per block
constexpr int kWarps = 4;          // 16 rows each
constexpr int kRowsPerWarp = kTile / kWarps;
constexpr int kThreadsPerBlock = kWarps * 32;

// Row strides of the shared-memory tiles. Tensor-core loads want 32-byte aligned 16x16 sub-tiles
// and strides that are a multiple of 16 bytes; padding rows by 16 bytes (8 halves) also spreads
// them over the banks. The fp32 path reads k and v by column (below), so its stride is odd.
template <typename F>
struct Layout {
  static constexpr bool kTensorCores = !std::is_same_v<F, float>;
  int hs, hsp;  // head size, and rounded up to 16 (the extra columns hold zeros)
  int ldf;      // F tiles of (64, hsp): q, k, v, dout
  int ldp;      // F tiles of (64, 64): P and dS, the inputs of the second products
  int lds;      // fp32 tiles of (64, 64): scores S and dP
  int ldo;      // fp32 tiles of (64, hsp): accumulators (O, dv, dk, dq)
  __host__ __device__ explicit Layout(int head_size)
      : hs(head_size),
        hsp((head_size + 15) / 16 * 16),
        ldf(hsp + (kTensorCores ? 8 : 1)),
        ldp(kTile + (kTensorCores ? 8 : 1)),
        lds(kTile + 4),
        ldo(hsp + 4) {}
  __host__ __device__ std::size_t f_tile() const { return round(sizeof(F) * kTile * ldf); }
  __host__ __device__ std::size_t p_tile() const { return round(sizeof(F) * kTile * ldp); }
  __host__ __device__ std::size_t s_tile() const { return round(sizeof(float) * kTile * lds); }
  __host__ __device__ std::size_t o_tile() const { return round(sizeof(float) * kTile * ldo); }
  __host__ __device__ std::size_t rows() const { return round(sizeof(float) * kTile); }
  // Forward: q, k, v; S; P; O and the tile's P v; m, l and the rescale factor per row.
  __host__ __device__ std::size_t forward_bytes() const {
    return 3 * f_tile() + s_tile() + p_tile() + 2 * o_tile() + 3 * rows();
  }
  // dk/dv: k, v, q, dout; S^T and dP^T; P^T and dS^T; dv and dk; lse and D per query.
  __host__ __device__ std::size_t dkdv_bytes() const {
    return 4 * f_tile() + 2 * s_tile() + 2 * p_tile() + 2 * o_tile() + 2 * rows();
  }
  // dq: q, dout, k, v; S and dP; dS; dq; lse and D per query.
  __host__ __device__ std::size_t dq_bytes() const {
    return 4 * f_tile() + 2 * s_tile() + p_tile() + o_tile() + 2 * rows();
  }
  __host__ __device__ static std::size_t round(std::size_t bytes) { return (bytes + 127) / 128 * 128; }
};

// Hands out consecutive regions of the block's dynamic shared memory.
struct SharedCarver {
  unsigned char* next;
  template <typename T>
  __device__ T* take(std::size_t bytes) {
    T* p = reinterpret_cast<T*>(next);
    next += bytes;
    return p;
  }
};

template <typename F>
struct WmmaType;
template <>
struct WmmaType<bf16> {
  using type = __nv_bfloat16;
};
template <>
struct WmmaType<fp16> {
  using type = __half;
};

// c (16, N) fp32 (+)= a (16, K) @ b, all in shared memory, for one warp. b is (K, N) row-major,
// or with kBT (N, K) row-major, i.e. the product is a @ b^T. N and K are multiples of 16.
// bf16/fp16: tensor cores, fp32 accumulation. fp32: each lane computes whole columns of c with
// fp32 fused multiply-adds (no TF32, so the result is an fp32 product like the CPU's).
template <bool kBT, typename F>
__device__ void warp_gemm(float* c, int ldc, const F* a, int lda, const F* b, int ldb, int N, int K, bool accumulate) {
  if constexpr (std::is_same_v<F, float>) {
    const int lane = threadIdx.x % 32;
    for (int col = lane; col < N; col += 32) {
      float acc[16];
      for (int r = 0; r < 16; ++r) acc[r] = accumulate ? c[r * ldc + col] : 0.0f;
      for (int k = 0; k < K; ++k) {
        const float bk = kBT ? b[col * ldb + k] : b[k * ldb + col];
        for (int r = 0; r < 16; ++r) acc[r] = fmaf(a[r * lda + k], bk, acc[r]);
      }
      for (int r = 0; r < 16; ++r) c[r * ldc + col] = acc[r];
    }
  } else {
    namespace w = nvcuda::wmma;
    using W = typename WmmaType<F>::type;
    using BLayout = std::conditional_t<kBT, w::col_major, w::row_major>;
    const W* wa = reinterpret_cast<const W*>(a);
    const W* wb = reinterpret_cast<const W*>(b);
    for (int n = 0; n < N; n += 16) {
      w::fragment<w::accumulator, 16, 16, 16, float> acc;
      if (accumulate)
        w::load_matrix_sync(acc, c + n, ldc, w::mem_row_major);
      else
        w::fill_fragment(acc, 0.0f);
      for (int k = 0; k < K; k += 16) {
        w::fragment<w::matrix_a, 16, 16, 16, W, w::row_major> fa;
        w::fragment<w::matrix_b, 16, 16, 16, W, BLayout> fb;
        w::load_matrix_sync(fa, wa + k, lda);
        // b^T as col-major: element (k, n) of the product's right side is b[n * ldb + k].
        w::load_matrix_sync(
            fb, kBT ? wb + static_cast<std::size_t>(n) * ldb + k : wb + static_cast<std::size_t>(k) * ldb + n, ldb);
        w::mma_sync(acc, fa, fb, acc);
      }
      w::store_matrix_sync(c + n, acc, ldc, w::mem_row_major);
    }
  }
  __syncwarp();
}

// All threads of the block: dst (64, hsp) with stride ld = rows [row0, row0 + 64) of one head's
// columns of src (row stride src_ld), zero where the row is past T or the column past hs.
// Warp w loads rows w, w + 4, ...; its lanes read consecutive columns of a row (coalesced).
template <typename F>
__device__ void load_tile(F* dst, int ld, const F* src, std::size_t src_ld, int row0, int T, const Layout<F>& L) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < kTile; r += kWarps) {
    const int t = row0 + r;
    for (int d = lane; d < L.hsp; d += 32)
      dst[r * ld + d] = (t < T && d < L.hs) ? src[static_cast<std::size_t>(t) * src_ld + d] : from_float<F>(0.0f);
  }
}

// Per query row t of a tile (one warp per 16 rows): lse[t] from the forward and D[t] = dout_t .
// out_t, or 0 for rows past T (their probabilities are masked to 0 anyway).
template <typename F>
__device__ void load_row_stats(float* lse_s, float* D_s, const float* lse, const F* dout, const F* out, int q0, int T,
                               int C, const Layout<F>& L) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp * kRowsPerWarp; r < (warp + 1) * kRowsPerWarp; ++r) {
    const int t = q0 + r;
    float dot = 0.0f;
    if (t < T)
      for (int d = lane; d < L.hs; d += 32) {
        const std::size_t at = static_cast<std::size_t>(t) * C + d;
        dot += to_float(dout[at]) * to_float(out[at]);
      }
    dot = warp_sum(dot);
    if (lane == 0) {
      D_s[r] = dot;
      lse_s[r] = t < T ? lse[t] : 0.0f;
    }
  }
}

// Forward. Grid (query tiles, B*NH). qkv, out and lse point at batch row b, head h already
// (see head_pointers); rows of qkv are 3C apart, rows of out C apart.
template <typename F>
__global__ void __launch_bounds__(kThreadsPerBlock)
    flash_forward_kernel(F* out, float* lse, const F* qkv, int T, int C, int NH, int hs, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const Layout<F> L(hs);
  const int b = blockIdx.y / NH, h = blockIdx.y % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * kTile;
  const std::size_t ld3 = 3 * static_cast<std::size_t>(C);
  const F* q = qkv + static_cast<std::size_t>(b) * T * ld3 + static_cast<std::size_t>(h) * hs;
  const F* k = q + C;
  const F* v = q + 2 * C;
  SharedCarver carve{smem};
  F* Qs = carve.take<F>(L.f_tile());
  F* Ks = carve.take<F>(L.f_tile());
  F* Vs = carve.take<F>(L.f_tile());
  float* Ss = carve.take<float>(L.s_tile());
  F* Ps = carve.take<F>(L.p_tile());
  float* Os = carve.take<float>(L.o_tile());
  float* PVs = carve.take<float>(L.o_tile());
  float* m_s = carve.take<float>(L.rows());
  float* l_s = carve.take<float>(L.rows());
  float* alpha_s = carve.take<float>(L.rows());

  load_tile(Qs, L.ldf, q, ld3, q0, T, L);
  const int r0 = warp * kRowsPerWarp;  // this warp's first row of the tile
  float* Sw = Ss + r0 * L.lds;
  F* Pw = Ps + r0 * L.ldp;
  float* Ow = Os + r0 * L.ldo;
  float* PVw = PVs + r0 * L.ldo;
  for (int r = 0; r < kRowsPerWarp; ++r)
    for (int d = lane; d < L.hsp; d += 32) Ow[r * L.ldo + d] = 0.0f;
  if (lane < kRowsPerWarp) {
    m_s[r0 + lane] = -INFINITY;
    l_s[r0 + lane] = 0.0f;
  }
  for (int kt = 0; kt <= static_cast<int>(blockIdx.x); ++kt) {  // causal: key tiles up to the diagonal
    const int k0 = kt * kTile;
    __syncthreads();  // every warp is done with the previous k and v (and Qs is loaded)
    load_tile(Ks, L.ldf, k, ld3, k0, T, L);
    load_tile(Vs, L.ldf, v, ld3, k0, T, L);
    __syncthreads();
    warp_gemm<true>(Sw, L.lds, Qs + r0 * L.ldf, L.ldf, Ks, L.ldf, kTile, L.hsp, false);  // S = q k^T (16,64)
    // The online softmax, one row at a time: each lane holds columns lane and lane + 32.
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int t = q0 + r0 + r;
      float s[2];
      for (int j = 0; j < 2; ++j) {
        const int u = k0 + lane + 32 * j;
        s[j] = (u <= t && u < T) ? Sw[r * L.lds + lane + 32 * j] * scale : -INFINITY;
      }
      const float m_old = m_s[r0 + r];
      const float m_new = fmaxf(m_old, warp_max(fmaxf(s[0], s[1])));
      float p[2];
      for (int j = 0; j < 2; ++j) p[j] = s[j] == -INFINITY ? 0.0f : expf(s[j] - m_new);
      for (int j = 0; j < 2; ++j) Pw[r * L.ldp + lane + 32 * j] = from_float<F>(p[j]);
      const float row_sum = warp_sum(p[0] + p[1]);
      if (lane == 0) {
        const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);  // rescales the old O and l
        m_s[r0 + r] = m_new;
        l_s[r0 + r] = l_s[r0 + r] * alpha + row_sum;
        alpha_s[r0 + r] = alpha;
      }
    }
    __syncwarp();
    warp_gemm<false>(PVw, L.ldo, Pw, L.ldp, Vs, L.ldf, L.hsp, kTile, false);  // P v (16,hsp)
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float alpha = alpha_s[r0 + r];
      for (int d = lane; d < L.hsp; d += 32) Ow[r * L.ldo + d] = Ow[r * L.ldo + d] * alpha + PVw[r * L.ldo + d];
    }
    __syncwarp();
  }
  // out = O / l; lse = m + log l.
  F* o = out + static_cast<std::size_t>(b) * T * C + static_cast<std::size_t>(h) * hs;
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int t = q0 + r0 + r;
    const float inv_l = 1.0f / l_s[r0 + r];
    if (t < T)
      for (int d = lane; d < hs; d += 32)
        o[static_cast<std::size_t>(t) * C + d] = from_float<F>(Ow[r * L.ldo + d] * inv_l);
  }
  if (lane < kRowsPerWarp) {
    const int t = q0 + r0 + lane;
    if (t < T) lse[(static_cast<std::size_t>(b) * NH + h) * T + t] = m_s[r0 + lane] + logf(l_s[r0 + lane]);
  }
}

// P and dS of one warp's 16 x 64 tile, from the scores S (or S^T) and dP (or dP^T) in fp32:
// p = exp(scale s - lse_t) where key u <= query t < T and u < T, else 0; ds = p (dp - D_t).
// With kKeysAreRows the warp's rows are keys (the dk/dv kernel: S^T), else queries (dq).
template <bool kKeysAreRows, typename F>
__device__ void probabilities_and_dscores(F* P, F* dS, int ldp, const float* S, const float* dP, int lds,
                                          const float* lse_s, const float* D_s, int row0, int col0, int r_off, int T,
                                          float scale) {
  const int lane = threadIdx.x % 32;
  for (int i = lane; i < kRowsPerWarp * kTile; i += 32) {
    const int r = i / kTile, c = i % kTile;
    const int qi = kKeysAreRows ? c : r_off + r;  // index of the query in the tile's row stats
    const int t = kKeysAreRows ? col0 + c : row0 + r, u = kKeysAreRows ? row0 + r : col0 + c;
    const float p = (u <= t && t < T && u < T) ? expf(S[r * lds + c] * scale - lse_s[qi]) : 0.0f;
    const float ds = p * (dP[r * lds + c] - D_s[qi]);
    if (P) P[r * ldp + c] = from_float<F>(p);
    dS[r * ldp + c] = from_float<F>(ds);
  }
  __syncwarp();
}

// Backward, dk and dv. Grid (key tiles, B*NH); block kt owns keys [64 kt, 64 kt + 64), warp w 16
// of them, and loops over the query tiles from the diagonal down.
template <typename F>
__global__ void __launch_bounds__(kThreadsPerBlock)
    flash_backward_dkdv_kernel(F* dqkv, const F* dout, const F* qkv, const F* out, const float* lse, int T, int C,
                               int NH, int hs, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const Layout<F> L(hs);
  const int b = blockIdx.y / NH, h = blockIdx.y % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = blockIdx.x * kTile;
  const std::size_t ld3 = 3 * static_cast<std::size_t>(C), head = static_cast<std::size_t>(h) * hs;
  const F* q = qkv + static_cast<std::size_t>(b) * T * ld3 + head;
  const F* dO = dout + static_cast<std::size_t>(b) * T * C + head;
  const F* o = out + static_cast<std::size_t>(b) * T * C + head;
  const float* lse_bh = lse + (static_cast<std::size_t>(b) * NH + h) * T;
  SharedCarver carve{smem};
  F* Ks = carve.take<F>(L.f_tile());
  F* Vs = carve.take<F>(L.f_tile());
  F* Qs = carve.take<F>(L.f_tile());
  F* dOs = carve.take<F>(L.f_tile());
  float* St = carve.take<float>(L.s_tile());
  float* dPt = carve.take<float>(L.s_tile());
  F* Pt = carve.take<F>(L.p_tile());
  F* dSt = carve.take<F>(L.p_tile());
  float* dV = carve.take<float>(L.o_tile());
  float* dK = carve.take<float>(L.o_tile());
  float* lse_s = carve.take<float>(L.rows());
  float* D_s = carve.take<float>(L.rows());

  load_tile(Ks, L.ldf, q + C, ld3, k0, T, L);
  load_tile(Vs, L.ldf, q + 2 * C, ld3, k0, T, L);
  const int r0 = warp * kRowsPerWarp;
  for (int r = r0; r < r0 + kRowsPerWarp; ++r)
    for (int d = lane; d < L.hsp; d += 32) {
      dV[r * L.ldo + d] = 0.0f;
      dK[r * L.ldo + d] = 0.0f;
    }
  const int query_tiles = (T + kTile - 1) / kTile;
  for (int qt = blockIdx.x; qt < query_tiles; ++qt) {
    const int q0 = qt * kTile;
    __syncthreads();  // every warp is done with the previous q, dout and row stats
    load_tile(Qs, L.ldf, q, ld3, q0, T, L);
    load_tile(dOs, L.ldf, dO, C, q0, T, L);
    load_row_stats(lse_s, D_s, lse_bh, dO, o, q0, T, C, L);
    __syncthreads();
    float* Sw = St + r0 * L.lds;
    float* dPw = dPt + r0 * L.lds;
    warp_gemm<true>(Sw, L.lds, Ks + r0 * L.ldf, L.ldf, Qs, L.ldf, kTile, L.hsp, false);    // S^T = k q^T
    warp_gemm<true>(dPw, L.lds, Vs + r0 * L.ldf, L.ldf, dOs, L.ldf, kTile, L.hsp, false);  // dP^T = v dout^T
    probabilities_and_dscores<true>(Pt + r0 * L.ldp, dSt + r0 * L.ldp, L.ldp, Sw, dPw, L.lds, lse_s, D_s, k0 + r0, q0,
                                    0, T, scale);
    warp_gemm<false>(dV + r0 * L.ldo, L.ldo, Pt + r0 * L.ldp, L.ldp, dOs, L.ldf, L.hsp, kTile, true);  // += P^T dout
    warp_gemm<false>(dK + r0 * L.ldo, L.ldo, dSt + r0 * L.ldp, L.ldp, Qs, L.ldf, L.hsp, kTile, true);  // += dS^T q
  }
  F* dk = dqkv + static_cast<std::size_t>(b) * T * ld3 + head + C;
  F* dv = dk + C;
  for (int r = r0; r < r0 + kRowsPerWarp && k0 + r < T; ++r)
    for (int d = lane; d < hs; d += 32) {
      const std::size_t at = static_cast<std::size_t>(k0 + r) * ld3 + d;
      dk[at] = from_float<F>(dK[r * L.ldo + d] * scale);
      dv[at] = from_float<F>(dV[r * L.ldo + d]);
    }
}

// Backward, dq. Grid (query tiles, B*NH); block qt owns queries [64 qt, 64 qt + 64), warp w 16
// of them, and loops over the key tiles up to the diagonal.
template <typename F>
__global__ void __launch_bounds__(kThreadsPerBlock)
    flash_backward_dq_kernel(F* dqkv, const F* dout, const F* qkv, const F* out, const float* lse, int T, int C, int NH,
                             int hs, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const Layout<F> L(hs);
  const int b = blockIdx.y / NH, h = blockIdx.y % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * kTile;
  const std::size_t ld3 = 3 * static_cast<std::size_t>(C), head = static_cast<std::size_t>(h) * hs;
  const F* q = qkv + static_cast<std::size_t>(b) * T * ld3 + head;
  const F* dO = dout + static_cast<std::size_t>(b) * T * C + head;
  const F* o = out + static_cast<std::size_t>(b) * T * C + head;
  SharedCarver carve{smem};
  F* Qs = carve.take<F>(L.f_tile());
  F* dOs = carve.take<F>(L.f_tile());
  F* Ks = carve.take<F>(L.f_tile());
  F* Vs = carve.take<F>(L.f_tile());
  float* Ss = carve.take<float>(L.s_tile());
  float* dPs = carve.take<float>(L.s_tile());
  F* dSs = carve.take<F>(L.p_tile());
  float* dQ = carve.take<float>(L.o_tile());
  float* lse_s = carve.take<float>(L.rows());
  float* D_s = carve.take<float>(L.rows());

  load_tile(Qs, L.ldf, q, ld3, q0, T, L);
  load_tile(dOs, L.ldf, dO, C, q0, T, L);
  load_row_stats(lse_s, D_s, lse + (static_cast<std::size_t>(b) * NH + h) * T, dO, o, q0, T, C, L);
  const int r0 = warp * kRowsPerWarp;
  for (int r = r0; r < r0 + kRowsPerWarp; ++r)
    for (int d = lane; d < L.hsp; d += 32) dQ[r * L.ldo + d] = 0.0f;
  for (int kt = 0; kt <= static_cast<int>(blockIdx.x); ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();
    load_tile(Ks, L.ldf, q + C, ld3, k0, T, L);
    load_tile(Vs, L.ldf, q + 2 * C, ld3, k0, T, L);
    __syncthreads();
    float* Sw = Ss + r0 * L.lds;
    float* dPw = dPs + r0 * L.lds;
    warp_gemm<true>(Sw, L.lds, Qs + r0 * L.ldf, L.ldf, Ks, L.ldf, kTile, L.hsp, false);    // S = q k^T
    warp_gemm<true>(dPw, L.lds, dOs + r0 * L.ldf, L.ldf, Vs, L.ldf, kTile, L.hsp, false);  // dP = dout v^T
    probabilities_and_dscores<false>(static_cast<F*>(nullptr), dSs + r0 * L.ldp, L.ldp, Sw, dPw, L.lds, lse_s, D_s,
                                     q0 + r0, k0, r0, T, scale);
    warp_gemm<false>(dQ + r0 * L.ldo, L.ldo, dSs + r0 * L.ldp, L.ldp, Ks, L.ldf, L.hsp, kTile, true);  // += dS k
  }
  F* dq = dqkv + static_cast<std::size_t>(b) * T * ld3 + head;
  for (int r = r0; r < r0 + kRowsPerWarp && q0 + r < T; ++r)
    for (int d = lane; d < hs; d += 32)
      dq[static_cast<std::size_t>(q0 + r) * ld3 + d] = from_float<F>(dQ[r * L.ldo + d] * scale);
}

// Opts the kernel in to `bytes` of dynamic shared memory (above the default 48 KiB), or refuses
// a head size whose tiles do not fit this device.
template <typename Kernel>
void allow_shared(Kernel kernel, std::size_t bytes, int hs, int C, int NH) {
  int device = 0, max_bytes = 0;
  SCALELAB_CUDA_CHECK(cudaGetDevice(&device));
  SCALELAB_CUDA_CHECK(cudaDeviceGetAttribute(&max_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > static_cast<std::size_t>(max_bytes))
    throw ConfigError("attention: the flash kernel's tiles for head size " + std::to_string(hs) + " (channels " +
                      std::to_string(C) + " / heads " + std::to_string(NH) + ") need " + std::to_string(bytes) +
                      " bytes of shared memory and this GPU has " + std::to_string(max_bytes) +
                      " per block; use more heads, bf16, or --attention naive");
  SCALELAB_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

void check_shape(int T, int C, int NH) {
  SCALELAB_CHECK(NH > 0 && C % NH == 0, "attention: channels ", C, " do not divide into ", NH, " heads");
  SCALELAB_CHECK(C / NH <= 128, "attention: head size ", C / NH, " is above the flash kernel's 128");
  SCALELAB_CHECK(T <= 65535 * kTile, "attention: T = ", T, " is above the flash kernel's grid");
}

}  // namespace

std::size_t attention_flash_shared_bytes(int head_size, std::size_t element_size) {
  return element_size == sizeof(float) ? Layout<float>(head_size).dkdv_bytes() : Layout<bf16>(head_size).dkdv_bytes();
}

template <typename F>
void attention_flash_forward(F* out, float* lse, const F* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
  if (B <= 0 || T <= 0) return;
  check_shape(T, C, NH);
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::size_t bytes = Layout<F>(hs).forward_bytes();
  allow_shared(flash_forward_kernel<F>, bytes, hs, C, NH);
  const dim3 grid((T + kTile - 1) / kTile, static_cast<unsigned>(B) * NH);
  flash_forward_kernel<F><<<grid, kThreadsPerBlock, bytes, stream>>>(out, lse, qkv, T, C, NH, hs, scale);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void attention_flash_backward(F* dqkv, const F* dout, const F* qkv, const F* out, const float* lse, int B, int T, int C,
                              int NH, cudaStream_t stream) {
  if (B <= 0 || T <= 0) return;
  check_shape(T, C, NH);
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const Layout<F> L(hs);
  const dim3 grid((T + kTile - 1) / kTile, static_cast<unsigned>(B) * NH);
  allow_shared(flash_backward_dkdv_kernel<F>, L.dkdv_bytes(), hs, C, NH);
  flash_backward_dkdv_kernel<F>
      <<<grid, kThreadsPerBlock, L.dkdv_bytes(), stream>>>(dqkv, dout, qkv, out, lse, T, C, NH, hs, scale);
  SCALELAB_CUDA_LAUNCH_CHECK();
  allow_shared(flash_backward_dq_kernel<F>, L.dq_bytes(), hs, C, NH);
  flash_backward_dq_kernel<F>
      <<<grid, kThreadsPerBlock, L.dq_bytes(), stream>>>(dqkv, dout, qkv, out, lse, T, C, NH, hs, scale);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

#define SCALELAB_INSTANTIATE(F)                                                                                 \
  template void attention_flash_forward<F>(F*, float*, const F*, int, int, int, int, cudaStream_t);             \
  template void attention_flash_backward<F>(F*, const F*, const F*, const F*, const float*, int, int, int, int, \
                                            cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
