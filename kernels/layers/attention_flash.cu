// Flash attention's three kernels (forward; backward's dk/dv and dq), written around one
// primitive: a warp multiplies a 16-row tile by a tile of K (qk^T) or of V (P v) held in shared
// memory, into fp32 in shared memory (warp_gemm). Each of the 4 warps of a block owns 16 rows of
// the block's 64, so after the block has loaded a tile of keys (or queries) the warps work
// without further block-wide barriers. Line by line this is the CPU twin's loop
// (reference/model/layers/attention_flash.cpp) with its BLAS tile products replaced by warp_gemm.
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/attention_flash.hpp"
#include "kernels/layers/attention_flash_mma.hpp"

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
  // Forward: each warp's S (16,64) and, once S is turned into P, its P v (16,hsp) share one slab.
  __host__ __device__ int slab() const { return kRowsPerWarp * (lds > ldo ? lds : ldo); }
  // Forward: q, k, v; the S / P v slabs; P; O; m, l and the rescale factor per row.
  __host__ __device__ std::size_t forward_bytes() const {
    return 3 * f_tile() + round(sizeof(float) * kWarps * slab()) + p_tile() + o_tile() + 3 * rows();
  }
  // Backward: dP's tile (fp32) first holds the query tile's out (F), which is only read to form
  // D = rowsum(dout * out) before dP is computed.
  __host__ __device__ std::size_t sd_tile() const { return s_tile() > f_tile() ? s_tile() : f_tile(); }
  // Backward accumulators (dk and dv, or dq): bf16/fp16 keep them in registers (tensor-core
  // fragments) and only need a 16 x 16 fp32 staging square per warp to write them out; fp32
  // keeps (64, hsp) fp32 tiles in shared memory.
  __host__ __device__ std::size_t acc_tiles(int count) const {
    return kTensorCores ? round(sizeof(float) * kWarps * 16 * kStageLd) : count * o_tile();
  }
  static constexpr int kStageLd = 20;
  // dk/dv: k, v, q, dout; S^T; dP^T (first out); P^T and dS^T; dv and dk; lse and D per query.
  __host__ __device__ std::size_t dkdv_bytes() const {
    return 4 * f_tile() + s_tile() + sd_tile() + 2 * p_tile() + acc_tiles(2) + 2 * rows();
  }
  // dq: q, dout, k, v; S; dP (first out); dS; dq; lse and D per query.
  __host__ __device__ std::size_t dq_bytes() const {
    return 4 * f_tile() + s_tile() + sd_tile() + p_tile() + acc_tiles(1) + 2 * rows();
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

// The tensor-core pieces (bf16/fp16 only): a warp's 16 x N fp32 accumulator as N/16 register
// fragments, and acc += a (16, K) @ b with a and b in shared memory, b (K, N) row-major or with
// kBT (N, K) row-major (the product is then a @ b^T). N <= 128 and K are multiples of 16. The
// loops run to the compile-time bound with a guard, so the fragment array is never indexed at run
// time (which would put it in local memory); each fragment of a is loaded once.
constexpr int kMaxBlocks = 128 / 16;
using Accumulator = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;

template <bool kBT, typename F>
__device__ void warp_mma(Accumulator (&acc)[kMaxBlocks], const F* a, int lda, const F* b, int ldb, int N, int K) {
  namespace w = nvcuda::wmma;
  using W = typename WmmaType<F>::type;
  using BLayout = std::conditional_t<kBT, w::col_major, w::row_major>;
  const W* wa = reinterpret_cast<const W*>(a);
  const W* wb = reinterpret_cast<const W*>(b);
  for (int k = 0; k < K; k += 16) {
    w::fragment<w::matrix_a, 16, 16, 16, W, w::row_major> fa;
    w::load_matrix_sync(fa, wa + k, lda);
#pragma unroll
    for (int j = 0; j < kMaxBlocks; ++j)
      if (16 * j < N) {
        const int n = 16 * j;
        // b^T as col-major: element (k, n) of the product's right side is b[n * ldb + k].
        w::fragment<w::matrix_b, 16, 16, 16, W, BLayout> fb;
        w::load_matrix_sync(
            fb, kBT ? wb + static_cast<std::size_t>(n) * ldb + k : wb + static_cast<std::size_t>(k) * ldb + n, ldb);
        w::mma_sync(acc[j], fa, fb, acc[j]);
      }
  }
}

__device__ inline void zero_accumulator(Accumulator (&acc)[kMaxBlocks], int N) {
#pragma unroll
  for (int j = 0; j < kMaxBlocks; ++j)
    if (16 * j < N) nvcuda::wmma::fill_fragment(acc[j], 0.0f);
}

// c (16, N) fp32 (+)= a (16, K) @ b, all in shared memory, for one warp; b as in warp_mma.
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
    Accumulator acc[kMaxBlocks];
#pragma unroll
    for (int j = 0; j < kMaxBlocks; ++j)
      if (16 * j < N) {
        if (accumulate)
          w::load_matrix_sync(acc[j], c + 16 * j, ldc, w::mem_row_major);
        else
          w::fill_fragment(acc[j], 0.0f);
      }
    warp_mma<kBT>(acc, a, lda, b, ldb, N, K);
#pragma unroll
    for (int j = 0; j < kMaxBlocks; ++j)
      if (16 * j < N) w::store_matrix_sync(c + 16 * j, acc[j], ldc, w::mem_row_major);
  }
  __syncwarp();
}

// All threads of the block: dst (64, hsp) with stride ld = rows [row0, row0 + 64) of one head's
// columns of src (row stride src_ld), zero where the row is past T or the column past hs.
// All threads of the block: dst (64, hsp) with stride ld = rows [row0, row0 + 64) of one head's
// columns of src (row stride src_ld), zero where the row is past T or the column past hs.
// Each thread has kBatch loads in flight before it stores any: one load at a time left every
// tile waiting on a full memory latency per element (the first version ran 7x slower than the
// naive attention). Where every row and the head's columns are 16-byte aligned (bf16/fp16 with
// hs a multiple of 8, the GPT-2 shapes) a load moves 16 bytes; otherwise one element.
constexpr int kBatch = 4;

template <typename V, typename F>
__device__ void load_tile_as(F* dst, int ld, const F* src, std::size_t src_ld, int row0, int T, int hs, int hsp) {
  constexpr int kPer = sizeof(V) / sizeof(F);  // elements per load
  const int per_row = hsp / kPer, total = kTile * per_row;
  for (int base = threadIdx.x; base < total; base += kBatch * blockDim.x) {
    V v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * blockDim.x, r = i / per_row, d = (i % per_row) * kPer, t = row0 + r;
      if (i < total && t < T && d < hs)
        v[j] = *reinterpret_cast<const V*>(src + static_cast<std::size_t>(t) * src_ld + d);
      else
        v[j] = V{};  // zero bits: 0.0 in float, bf16 and fp16
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * blockDim.x;
      if (i < total) *reinterpret_cast<V*>(dst + (i / per_row) * ld + (i % per_row) * kPer) = v[j];
    }
  }
}

template <typename F>
__device__ void load_tile(F* dst, int ld, const F* src, std::size_t src_ld, int row0, int T, const Layout<F>& L) {
  constexpr int kPer = 16 / sizeof(F);
  const bool aligned = L.hs % kPer == 0 && src_ld % kPer == 0 && ld % kPer == 0 && aligned16(src) && aligned16(dst);
  if (aligned)
    load_tile_as<uint4>(dst, ld, src, src_ld, row0, T, L.hs, L.hsp);
  else
    load_tile_as<F>(dst, ld, src, src_ld, row0, T, L.hs, L.hsp);
}

// Per query row of a tile whose dout and out are in shared memory: D = dout . out, and the
// forward's lse (0 for rows past T: their probabilities are masked to 0 anyway).
template <typename F>
__device__ void row_stats(float* lse_s, float* D_s, const float* lse, const F* dOs, const F* Os, int q0, int T,
                          const Layout<F>& L) {
  for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
    float dot = 0.0f;
    for (int d = 0; d < L.hs; ++d) dot += to_float(dOs[r * L.ldf + d]) * to_float(Os[r * L.ldf + d]);
    D_s[r] = dot;
    lse_s[r] = q0 + r < T ? lse[q0 + r] : 0.0f;
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
  float* slabs = carve.take<float>(Layout<F>::round(sizeof(float) * kWarps * L.slab()));
  F* Ps = carve.take<F>(L.p_tile());
  float* Os = carve.take<float>(L.o_tile());
  float* m_s = carve.take<float>(L.rows());
  float* l_s = carve.take<float>(L.rows());
  float* alpha_s = carve.take<float>(L.rows());

  load_tile(Qs, L.ldf, q, ld3, q0, T, L);
  const int r0 = warp * kRowsPerWarp;  // this warp's first row of the tile
  float* Sw = slabs + warp * L.slab();
  float* PVw = Sw;  // the same slab, once S has become P
  F* Pw = Ps + r0 * L.ldp;
  float* Ow = Os + r0 * L.ldo;
  for (int r = 0; r < kRowsPerWarp; ++r)
    for (int d = lane; d < L.hsp; d += 32) Ow[r * L.ldo + d] = 0.0f;
  if (lane < kRowsPerWarp) {
    m_s[r0 + lane] = -INFINITY;
    l_s[r0 + lane] = 0.0f;
  }
  // The online softmax below: two lanes per row, each with 32 of its 64 columns.
  const int my_row = lane / 2, my_col = (lane % 2) * 32, my_t = q0 + r0 + my_row;
  for (int kt = 0; kt <= static_cast<int>(blockIdx.x); ++kt) {  // causal: key tiles up to the diagonal
    const int k0 = kt * kTile;
    __syncthreads();  // every warp is done with the previous k and v (and Qs is loaded)
    load_tile(Ks, L.ldf, k, ld3, k0, T, L);
    load_tile(Vs, L.ldf, v, ld3, k0, T, L);
    __syncthreads();
    warp_gemm<true>(Sw, L.lds, Qs + r0 * L.ldf, L.ldf, Ks, L.ldf, kTile, L.hsp, false);  // S = q k^T (16,64)
    // Keys past the query (causal) or past T are masked: their score is -inf, their p 0.
    const float* srow = Sw + my_row * L.lds + my_col;
    const int last = min(my_t, T - 1) - (k0 + my_col);  // columns 0..last of this lane's 32 are kept
    float mx = -INFINITY;
    for (int j = 0; j < 32; ++j)
      if (j <= last) mx = fmaxf(mx, srow[j] * scale);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_old = m_s[r0 + my_row];
    const float m_new = fmaxf(m_old, mx);
    float sum = 0.0f;
    F* prow = Pw + my_row * L.ldp + my_col;
    for (int j = 0; j < 32; ++j) {
      const float p = j <= last ? __expf(srow[j] * scale - m_new) : 0.0f;
      prow[j] = from_float<F>(p);
      sum += p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    __syncwarp();  // both lanes of a row have read m_s before it changes
    if (lane % 2 == 0) {
      const float alpha = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);  // rescales the old O and l
      m_s[r0 + my_row] = m_new;
      l_s[r0 + my_row] = l_s[r0 + my_row] * alpha + sum;
      alpha_s[r0 + my_row] = alpha;
    }
    __syncwarp();
    warp_gemm<false>(PVw, L.ldo, Pw, L.ldp, Vs, L.ldf, L.hsp, kTile, false);  // P v (16,hsp), over S
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
    const float p = (u <= t && t < T && u < T) ? __expf(S[r * lds + c] * scale - lse_s[qi]) : 0.0f;
    const float ds = p * (dP[r * lds + c] - D_s[qi]);
    if (P) P[r * ldp + c] = from_float<F>(p);
    dS[r * ldp + c] = from_float<F>(ds);
  }
  __syncwarp();
}

// Where the backward kernels' block (batch row b, head h = blockIdx.y as b NH + h) reads and
// writes: its head's columns of qkv (and of dqkv, dq first), dout and out, and its row of lse.
template <typename F>
struct BackwardHead {
  std::size_t ld3;  // row stride of qkv and dqkv: 3C
  const F *q, *dout, *out;
  const float* lse;
  F* dq;
  __device__ BackwardHead(F* dqkv, const F* dout_all, const F* qkv, const F* out_all, const float* lse_all, int T,
                          int C, int NH, int hs)
      : ld3(3 * static_cast<std::size_t>(C)) {
    const std::size_t b = blockIdx.y / NH, h = blockIdx.y % NH, head = h * hs;
    q = qkv + b * T * ld3 + head;
    dq = dqkv + b * T * ld3 + head;
    dout = dout_all + b * T * C + head;
    out = out_all + b * T * C + head;
    lse = lse_all + (b * NH + h) * T;
  }
};

// Writes a warp's 16 x hs result to global rows `row0`.. (those below T), scaled: from register
// fragments through a 16 x 16 fp32 staging square (bf16/fp16), or from its fp32 tile rows (fp32).
template <typename F>
__device__ void store_rows(F* dst, std::size_t ld, int row0, int T, float scale, const Layout<F>& L,
                           Accumulator (&acc)[kMaxBlocks], float* stage, const float* tile) {
  const int lane = threadIdx.x % 32;
  if constexpr (Layout<F>::kTensorCores) {
#pragma unroll
    for (int j = 0; j < kMaxBlocks; ++j)
      if (16 * j < L.hsp) {
        nvcuda::wmma::store_matrix_sync(stage, acc[j], Layout<F>::kStageLd, nvcuda::wmma::mem_row_major);
        __syncwarp();
        for (int i = lane; i < 256; i += 32) {
          const int r = i / 16, d = 16 * j + i % 16;
          if (row0 + r < T && d < L.hs)
            dst[static_cast<std::size_t>(row0 + r) * ld + d] = from_float<F>(stage[r * Layout<F>::kStageLd + i % 16] *
                                                                             scale);
        }
        __syncwarp();
      }
  } else {
    for (int r = 0; r < kRowsPerWarp && row0 + r < T; ++r)
      for (int d = lane; d < L.hs; d += 32)
        dst[static_cast<std::size_t>(row0 + r) * ld + d] = from_float<F>(tile[r * L.ldo + d] * scale);
  }
}

// acc (+)= a @ b for one warp: into register fragments (bf16/fp16) or into its fp32 tile rows
// in shared memory (fp32).
template <typename F>
__device__ void accumulate_product(Accumulator (&acc)[kMaxBlocks], float* tile, const F* a, int lda, const F* b,
                                   int ldb, const Layout<F>& L) {
  if constexpr (Layout<F>::kTensorCores)
    warp_mma<false>(acc, a, lda, b, ldb, L.hsp, kTile);
  else
    warp_gemm<false>(tile, L.ldo, a, lda, b, ldb, L.hsp, kTile, true);
}

template <typename F>
__device__ void clear_accumulator(Accumulator (&acc)[kMaxBlocks], float* tile, const Layout<F>& L) {
  if constexpr (Layout<F>::kTensorCores) {
    zero_accumulator(acc, L.hsp);
  } else {
    const int lane = threadIdx.x % 32;
    for (int r = 0; r < kRowsPerWarp; ++r)
      for (int d = lane; d < L.hsp; d += 32) tile[r * L.ldo + d] = 0.0f;
  }
}

// Backward, dk and dv. Grid (key tiles, B*NH); block kt owns keys [64 kt, 64 kt + 64), warp w 16
// of them, and loops over the query tiles from the diagonal down.
template <typename F>
__global__ void __launch_bounds__(kThreadsPerBlock)
    flash_backward_dkdv_kernel(F* dqkv, const F* dout, const F* qkv, const F* out, const float* lse, int T, int C,
                               int NH, int hs, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const Layout<F> L(hs);
  const int warp = threadIdx.x / 32;
  const int k0 = blockIdx.x * kTile;
  const BackwardHead<F> at(dqkv, dout, qkv, out, lse, T, C, NH, hs);
  const std::size_t ld3 = at.ld3;
  const F *q = at.q, *dO = at.dout, *o = at.out;
  const float* lse_bh = at.lse;
  SharedCarver carve{smem};
  F* Ks = carve.take<F>(L.f_tile());
  F* Vs = carve.take<F>(L.f_tile());
  F* Qs = carve.take<F>(L.f_tile());
  F* dOs = carve.take<F>(L.f_tile());
  float* St = carve.take<float>(L.s_tile());
  float* dPt = carve.take<float>(L.sd_tile());
  F* Os = reinterpret_cast<F*>(dPt);  // out, until D is formed
  F* Pt = carve.take<F>(L.p_tile());
  F* dSt = carve.take<F>(L.p_tile());
  float* acc_smem = carve.take<float>(L.acc_tiles(2));
  float* lse_s = carve.take<float>(L.rows());
  float* D_s = carve.take<float>(L.rows());

  const int r0 = warp * kRowsPerWarp;
  // fp32: the warp's rows of the dv and dk tiles; bf16/fp16: its staging square.
  float* dV = acc_smem + r0 * L.ldo;
  float* dK = acc_smem + (kTile + r0) * L.ldo;
  Accumulator acc_dv[kMaxBlocks], acc_dk[kMaxBlocks];
  clear_accumulator(acc_dv, dV, L);
  clear_accumulator(acc_dk, dK, L);
  load_tile(Ks, L.ldf, q + C, ld3, k0, T, L);
  load_tile(Vs, L.ldf, q + 2 * C, ld3, k0, T, L);
  const int query_tiles = (T + kTile - 1) / kTile;
  for (int qt = blockIdx.x; qt < query_tiles; ++qt) {
    const int q0 = qt * kTile;
    __syncthreads();  // every warp is done with the previous q, dout, dP and row stats
    load_tile(Qs, L.ldf, q, ld3, q0, T, L);
    load_tile(dOs, L.ldf, dO, C, q0, T, L);
    load_tile(Os, L.ldf, o, C, q0, T, L);
    __syncthreads();
    row_stats(lse_s, D_s, lse_bh, dOs, Os, q0, T, L);
    __syncthreads();  // D is formed: dP may overwrite out
    float* Sw = St + r0 * L.lds;
    float* dPw = dPt + r0 * L.lds;
    warp_gemm<true>(Sw, L.lds, Ks + r0 * L.ldf, L.ldf, Qs, L.ldf, kTile, L.hsp, false);    // S^T = k q^T
    warp_gemm<true>(dPw, L.lds, Vs + r0 * L.ldf, L.ldf, dOs, L.ldf, kTile, L.hsp, false);  // dP^T = v dout^T
    probabilities_and_dscores<true>(Pt + r0 * L.ldp, dSt + r0 * L.ldp, L.ldp, Sw, dPw, L.lds, lse_s, D_s, k0 + r0, q0,
                                    0, T, scale);
    accumulate_product(acc_dv, dV, Pt + r0 * L.ldp, L.ldp, dOs, L.ldf, L);  // dv += P^T dout
    accumulate_product(acc_dk, dK, dSt + r0 * L.ldp, L.ldp, Qs, L.ldf, L);  // dk += dS^T q
    __syncwarp();
  }
  F* dk = at.dq + C;
  float* stage = acc_smem + warp * 16 * Layout<F>::kStageLd;
  store_rows(dk, ld3, k0 + r0, T, scale, L, acc_dk, stage, dK);
  store_rows(dk + C, ld3, k0 + r0, T, 1.0f, L, acc_dv, stage, dV);
}

// Backward, dq. Grid (query tiles, B*NH); block qt owns queries [64 qt, 64 qt + 64), warp w 16
// of them, and loops over the key tiles up to the diagonal.
template <typename F>
__global__ void __launch_bounds__(kThreadsPerBlock)
    flash_backward_dq_kernel(F* dqkv, const F* dout, const F* qkv, const F* out, const float* lse, int T, int C, int NH,
                             int hs, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const Layout<F> L(hs);
  const int warp = threadIdx.x / 32;
  const int q0 = blockIdx.x * kTile;
  const BackwardHead<F> at(dqkv, dout, qkv, out, lse, T, C, NH, hs);
  const std::size_t ld3 = at.ld3;
  const F *q = at.q, *dO = at.dout, *o = at.out;
  SharedCarver carve{smem};
  F* Qs = carve.take<F>(L.f_tile());
  F* dOs = carve.take<F>(L.f_tile());
  F* Ks = carve.take<F>(L.f_tile());
  F* Vs = carve.take<F>(L.f_tile());
  float* Ss = carve.take<float>(L.s_tile());
  float* dPs = carve.take<float>(L.sd_tile());
  F* Os = reinterpret_cast<F*>(dPs);  // out, until D is formed
  F* dSs = carve.take<F>(L.p_tile());
  float* acc_smem = carve.take<float>(L.acc_tiles(1));
  float* lse_s = carve.take<float>(L.rows());
  float* D_s = carve.take<float>(L.rows());

  const int r0 = warp * kRowsPerWarp;
  float* dQ = acc_smem + r0 * L.ldo;
  Accumulator acc_dq[kMaxBlocks];
  clear_accumulator(acc_dq, dQ, L);
  load_tile(Qs, L.ldf, q, ld3, q0, T, L);
  load_tile(dOs, L.ldf, dO, C, q0, T, L);
  load_tile(Os, L.ldf, o, C, q0, T, L);
  __syncthreads();
  row_stats(lse_s, D_s, at.lse, dOs, Os, q0, T, L);
  for (int kt = 0; kt <= static_cast<int>(blockIdx.x); ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // D is formed (first pass), every warp is done with the previous k, v and dP
    load_tile(Ks, L.ldf, q + C, ld3, k0, T, L);
    load_tile(Vs, L.ldf, q + 2 * C, ld3, k0, T, L);
    __syncthreads();
    float* Sw = Ss + r0 * L.lds;
    float* dPw = dPs + r0 * L.lds;
    warp_gemm<true>(Sw, L.lds, Qs + r0 * L.ldf, L.ldf, Ks, L.ldf, kTile, L.hsp, false);    // S = q k^T
    warp_gemm<true>(dPw, L.lds, dOs + r0 * L.ldf, L.ldf, Vs, L.ldf, kTile, L.hsp, false);  // dP = dout v^T
    probabilities_and_dscores<false>(static_cast<F*>(nullptr), dSs + r0 * L.ldp, L.ldp, Sw, dPw, L.lds, lse_s, D_s,
                                     q0 + r0, k0, r0, T, scale);
    accumulate_product(acc_dq, dQ, dSs + r0 * L.ldp, L.ldp, Ks, L.ldf, L);  // dq += dS k
    __syncwarp();
  }
  float* stage = acc_smem + warp * 16 * Layout<F>::kStageLd;
  store_rows(at.dq, ld3, q0 + r0, T, scale, L, acc_dq, stage, dQ);
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

template <typename F>
void attention_flash_forward(F* out, float* lse, const F* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
  if (B <= 0 || T <= 0) return;
  check_shape(T, C, NH);
  const int hs = C / NH;
  if constexpr (Layout<F>::kTensorCores) {
    if (flash_mma_applies(hs, C, out, qkv)) return flash_mma_forward(out, lse, qkv, B, T, C, NH, stream);
  }
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
  if constexpr (Layout<F>::kTensorCores) {
    if (flash_mma_applies(hs, C, dqkv, dout, qkv, out))
      return flash_mma_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, stream);
  }
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
