// Matrix products on the GPU through cuBLAS, in the row-major form of the CPU's gemm()
// (core/blas.hpp): C = alpha * op(A) @ op(B) + beta * C, every matrix row-major with its
// leading dimension. Inputs and outputs are float, bf16 or fp16; accumulation is always fp32.
//
// cuBLAS is column-major. A row-major matrix (r, c) with leading dimension ld is the same memory
// as the column-major matrix (c, r) with the same ld, i.e. its transpose. So the row-major
// C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: call cuBLAS with A and B swapped,
// m and n swapped, and the transpose flags unchanged.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include "core/memory.hpp"
#include "kernels/core/device_buffer.hpp"

namespace scalelab::cuda {

// What a matrix-product launcher needs: a cuBLAS handle bound to a stream (and a cuBLASLt handle
// for the fused forms below), a workspace that the memory tracker counts (the two share it: their
// calls run one after the other on the one stream), and whether fp32 products may use TF32 tensor
// cores (10-bit mantissa inputs: about 8x faster on an H100, but not comparable with an fp32 CPU
// reference to 1e-5; tests keep it off). Owning the handles here, not in a global, keeps the
// choice explicit.
class Blas {
 public:
  Blas(cudaStream_t stream, MemoryTracker* tracker, bool allow_tf32 = false);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  cublasHandle_t handle() const { return handle_; }
  cublasLtHandle_t lt_handle() const { return lt_handle_; }
  cudaStream_t stream() const { return stream_; }
  void* workspace() const { return workspace_.data(); }
  std::size_t workspace_bytes() const { return workspace_.bytes(); }
  bool allow_tf32() const { return allow_tf32_; }

  static constexpr std::size_t kWorkspaceBytes = 32u << 20;  // cuBLAS's recommendation for Hopper

  // cuBLASLt's algorithm for a fused product (gemm_epilogue), asked of its heuristic once per
  // description (types, shapes, strides, epilogue, pointer alignments) and then remembered:
  // the heuristic costs tens of microseconds of host time, and a training step asks for the same
  // few products in every layer. nullopt: cuBLASLt has none for it. The entry itself is returned,
  // so that an algorithm the library then refuses to run can be struck from it.
  using LtKey = std::array<std::int64_t, 16>;
  std::optional<cublasLtMatmulAlgo_t>& lt_algorithm(
      const LtKey& key, const std::function<std::optional<cublasLtMatmulAlgo_t>()>& ask) const;

 private:
  cublasHandle_t handle_ = nullptr;
  cublasLtHandle_t lt_handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool allow_tf32_ = false;
  // Scratch that every product may overwrite, even through a const Blas: not part of its state.
  mutable DeviceBuffer<unsigned char> workspace_;
  mutable std::map<LtKey, std::optional<cublasLtMatmulAlgo_t>> lt_algorithms_;  // a cache, as above
};

// Row-major C (m,n) = alpha * op(A) (m,k) @ op(B) (k,n) + beta * C. T: float, __nv_bfloat16, __half.
template <typename T>
void gemm(const Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const T* a, int lda,
          const T* b, int ldb, float beta, T* c, int ldc);

// The same for `batch` independent products whose matrices sit at fixed strides (in elements):
// product i uses a + i*stride_a, b + i*stride_b, c + i*stride_c. Attention uses it with the
// head as the batch index: heads are hs columns apart inside one row of qkv.
template <typename T>
void gemm_strided_batched(const Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const T* a,
                          int lda, long long stride_a, const T* b, int ldb, long long stride_b, float beta, T* c,
                          int ldc, long long stride_c, int batch);

// A product with an epilogue: cuBLASLt applies it to the fp32 result inside the product's own
// kernel, before the one rounding to T, where separate kernels would write the product out and
// read it back (for GPT-2's MLP in bf16, 50 MB each way a layer). Row-major, as gemm():
//   kBias      C (m,n) = op(A) op(B) + bias, bias (n) added to every row;
//   kGeluBias  aux (m,n) = op(A) op(B) + bias, C = gelu(aux) (the MLP's fc layer; aux is the
//              pre-activation the backward needs);
//   kDGelu     C = (op(A) op(B)) * gelu'(aux), aux (m,n) given (the fc projection's input
//              gradient, taken through the GELU in the same pass).
// aux's rows are ld_aux apart (a multiple of 8). cuBLASLt does not say which GELU it computes;
// the tanh form (GPT-2's, the CPU twin's) and the erf form differ by at most 4.7e-4 in value and
// 8.7e-4 in slope (near x = 2.7 and 2.0), less than half a bf16 unit of the values they round to;
// in fp16 about one unit, inside the GPU tests' fp16 tolerance (2e-3).
enum class Epilogue { kBias, kGeluBias, kDGelu };

template <typename T>
struct EpilogueArgs {
  Epilogue kind = Epilogue::kBias;
  const T* bias = nullptr;    // kBias, kGeluBias
  T* aux_out = nullptr;       // kGeluBias: the pre-activation, written
  const T* aux_in = nullptr;  // kDGelu: the pre-activation, read
  int ld_aux = 0;
};

// Runs the product with its epilogue and returns true; or returns false, having done nothing,
// where cuBLASLt has no algorithm for it (a type, shape or alignment it does not fuse), so that
// the caller runs the unfused kernels instead. T: __nv_bfloat16, __half.
template <typename T>
bool gemm_epilogue(const Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, const T* a, int lda, const T* b,
                   int ldb, T* c, int ldc, const EpilogueArgs<T>& epilogue);

}  // namespace scalelab::cuda
