// The CPU emulation of kernels/core/ptx.cuh (same functions, same meaning), which a kernel
// compiled for tests/simt/ includes in its place: this directory comes first on the include path
// of the emulated tests. Each instruction is written from the PTX ISA's description of it:
//   ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16  ("Warp-level matrix load instruction")
//   mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}  ("Matrix Fragments for mma.m16n8k16")
//   cp.async.cg.shared.global / commit_group / wait_group
// and checks what the hardware requires of its operands (addresses inside shared memory, 16-byte
// aligned rows and copies), failing with the thread's name where a GPU would fault or read
// garbage. The sums of mma.sync are exact products added in double and rounded once to fp32;
// the hardware's own order and rounding differ from that by a few fp32 ulps.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/core/dtype.hpp"
#include "simt.hpp"

namespace scalelab::cuda::ptx {

// What a test can static_assert to know it got this file and not the real one.
inline constexpr bool kEmulated = true;

inline unsigned char* dynamic_shared_memory() { return simt::shared_memory(); }

namespace emulated {

using Registers = std::array<std::uint32_t, 4>;

inline void check_row(const char* op, const void* row) {
  if (!simt::in_shared_memory(row, 16))
    simt::fail(std::string(op) + ": a row address outside the block's shared memory");
  if (reinterpret_cast<std::uintptr_t>(row) % 16 != 0)
    simt::fail(std::string(op) + ": a row address that is not 16-byte aligned");
}

inline std::uint16_t element(const void* row, int k) {  // the k-th 16-bit element of a row
  std::uint16_t e;
  std::memcpy(&e, static_cast<const unsigned char*>(row) + 2 * k, 2);
  return e;
}

// The wavefronts one 8x8 matrix of ldmatrix takes: its 8 rows of 16 bytes (4 banks each) are
// served together, so each bank serves as many wavefronts as distinct rows touch it; at least one.
inline std::uint64_t matrix_wavefronts(const void* const* const* rows) {
  int rows_in_bank[32] = {};
  for (int r = 0; r < 8; ++r) {
    bool repeat = false;  // the same row twice is read once
    for (int e = 0; e < r; ++e) repeat |= *rows[e] == *rows[r];
    if (repeat) continue;
    const auto bank = static_cast<int>(reinterpret_cast<std::uintptr_t>(*rows[r]) / 4 % 32);
    for (int k = 0; k < 4; ++k) ++rows_in_bank[(bank + k) % 32];
  }
  int most = 1;
  for (int n : rows_in_bank) most = n > most ? n : most;
  return static_cast<std::uint64_t>(most);
}

// ins[j]: lane j's row address (row j % 8 of matrix j / 8). Lane L = 4g + i receives, in
// register m, matrix m's elements (row g; columns 2i, 2i + 1), or with .trans (rows 2i, 2i + 1;
// column g); the first of each pair in the lower half.
template <bool kTrans>
void ldmatrix(const void* const* const* ins, Registers* const* outs) {
  for (int lane = 0; lane < 32; ++lane) check_row(kTrans ? "ldmatrix.trans" : "ldmatrix", *ins[lane]);
  std::uint64_t wavefronts = 0;
  for (int m = 0; m < 4; ++m) wavefronts += matrix_wavefronts(ins + 8 * m);
  simt::count_shared_wavefronts(wavefronts, 4);  // 4 x 128 bytes: one wavefront a matrix at best
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, i = lane % 4;
    for (int m = 0; m < 4; ++m) {
      std::uint16_t lo, hi;
      if (!kTrans) {
        lo = element(*ins[8 * m + g], 2 * i);
        hi = element(*ins[8 * m + g], 2 * i + 1);
      } else {
        lo = element(*ins[8 * m + 2 * i], g);
        hi = element(*ins[8 * m + 2 * i + 1], g);
      }
      (*outs[lane])[m] = static_cast<std::uint32_t>(lo) | static_cast<std::uint32_t>(hi) << 16;
    }
  }
}

template <typename F>
double widen(std::uint16_t bits) {
  if constexpr (std::is_same_v<F, bf16>) {
    const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  } else {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  }
}

struct MmaIn {
  std::uint32_t a[4], b[2];
  float c[4];
};

// With g = lane / 4 and i = lane % 4, lane L holds A[g][2i, 2i+1] (a[0]), A[g+8][2i, 2i+1] (a[1]),
// A[g][2i+8, 2i+9] (a[2]), A[g+8][2i+8, 2i+9] (a[3]); B[2i, 2i+1][g] (b[0]), B[2i+8, 2i+9][g]
// (b[1]); C and D at [g][2i, 2i+1] (elements 0, 1) and [g+8][2i, 2i+1] (2, 3).
template <typename F>
void mma(const MmaIn* const* ins, std::array<float, 4>* const* outs) {
  double A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const MmaIn& in = *ins[lane];
    const int g = lane / 4, i = lane % 4;
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h)
        A[g + 8 * (r & 1)][2 * i + h + 8 * (r >> 1)] = widen<F>(static_cast<std::uint16_t>(in.a[r] >> (16 * h)));
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < 2; ++h) B[2 * i + h + 8 * r][g] = widen<F>(static_cast<std::uint16_t>(in.b[r] >> (16 * h)));
    for (int e = 0; e < 4; ++e) C[g + 8 * (e >> 1)][2 * i + (e & 1)] = in.c[e];
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, i = lane % 4;
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e >> 1), col = 2 * i + (e & 1);
      double sum = C[row][col];
      for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
      (*outs[lane])[e] = static_cast<float>(sum);
    }
  }
}

}  // namespace emulated

inline void ldmatrix_x4(std::uint32_t (&r)[4], const void* row_address) {
  const auto out = simt::warp_collective<const void*, emulated::Registers>("ldmatrix", row_address,
                                                                           emulated::ldmatrix<false>);
  std::memcpy(r, out.data(), sizeof r);
}
inline void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row_address) {
  const auto out = simt::warp_collective<const void*, emulated::Registers>("ldmatrix.trans", row_address,
                                                                           emulated::ldmatrix<true>);
  std::memcpy(r, out.data(), sizeof r);
}

template <typename F>
void mma_16x8x16(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  static_assert(std::is_same_v<F, bf16> || std::is_same_v<F, fp16>, "tensor-core products take bf16 or fp16");
  const emulated::MmaIn in{{a[0], a[1], a[2], a[3]}, {b0, b1}, {d[0], d[1], d[2], d[3]}};
  const auto out = simt::warp_collective<emulated::MmaIn, std::array<float, 4>>("mma.sync", in, emulated::mma<F>);
  std::memcpy(d, out.data(), sizeof d);
}

inline void cp_async_16(void* dst_shared, const void* src_global, bool valid) {
  if (reinterpret_cast<std::uintptr_t>(dst_shared) % 16 != 0 ||
      (valid && reinterpret_cast<std::uintptr_t>(src_global) % 16 != 0))
    simt::fail("cp.async of 16 bytes: the source and destination must be 16-byte aligned");
  simt::async_copy(dst_shared, src_global, 16, valid);
}
inline void cp_async_commit() { simt::async_commit(); }
template <int kPending>
void cp_async_wait() {
  simt::async_wait(kPending);
}

// A cache hint: nothing to do.
inline void prefetch_l2(const void*) {}

// The hardware's tanh.approx.f32 differs from tanh by up to 2^-11 relative; the C library's is
// within an ulp or two of it, so an emulated kernel is that much closer to its CPU twin.
inline float tanh_approx(float u) { return std::tanh(u); }

}  // namespace scalelab::cuda::ptx
