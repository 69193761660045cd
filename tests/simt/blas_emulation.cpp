// cuBLAS and cuBLASLt calls of kernels/core/blas.cpp, on the CPU (see blas_emulation.hpp for what
// is emulated and what is refused; the runtime's calls are in runtime_emulation.cpp).
#include "blas_emulation.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace scalelab::blas_emulation {

Controls& controls() {
  static Controls c;
  return c;
}

namespace {

// One element of a matrix of `type` at p[i], widened.
double load(cudaDataType_t type, const void* p, std::size_t i) {
  switch (type) {
    case CUDA_R_32F: return static_cast<const float*>(p)[i];
    case CUDA_R_16BF: return static_cast<double>(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    case CUDA_R_16F: return static_cast<double>(__half2float(static_cast<const __half*>(p)[i]));
    default: std::abort();  // refused before any load (supported())
  }
}

// Stores v at p[i], rounded once to `type` (through float: a double rounding of at most half an
// fp32 unit, far below the half types' units).
void store(cudaDataType_t type, void* p, std::size_t i, double v) {
  const float f = static_cast<float>(v);
  switch (type) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = f; return;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(f); return;
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __float2half(f); return;
    default: std::abort();
  }
}

bool supported(cudaDataType_t type) { return type == CUDA_R_32F || type == CUDA_R_16BF || type == CUDA_R_16F; }

// A column-major matrix: rows x cols, column j at j * ld.
struct Matrix {
  cudaDataType_t type;
  std::uint64_t rows, cols;
  std::int64_t ld;
};

// op(X) for a stored X: the shape the product sees.
std::uint64_t op_rows(const Matrix& x, cublasOperation_t op) { return op == CUBLAS_OP_N ? x.rows : x.cols; }
std::uint64_t op_cols(const Matrix& x, cublasOperation_t op) { return op == CUBLAS_OP_N ? x.cols : x.rows; }
// Element (i, j) of op(X).
double op_at(const Matrix& x, const void* p, cublasOperation_t op, std::uint64_t i, std::uint64_t j) {
  const std::uint64_t r = op == CUBLAS_OP_N ? i : j, c = op == CUBLAS_OP_N ? j : i;
  return load(x.type, p, r + c * static_cast<std::uint64_t>(x.ld));
}

// (op(A) op(B))(i, j), in double.
double dot(const Matrix& a, const void* pa, cublasOperation_t ta, const Matrix& b, const void* pb, cublasOperation_t tb,
           std::uint64_t k, std::uint64_t i, std::uint64_t j) {
  double s = 0;
  for (std::uint64_t l = 0; l < k; ++l) s += op_at(a, pa, ta, i, l) * op_at(b, pb, tb, l, j);
  return s;
}

// GPT-2's GELU (the tanh form) and its slope.
constexpr double kSqrt2OverPi = 0.7978845608028654, kCubic = 0.044715;
double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x))); }
double gelu_slope(double x) {
  const double u = kSqrt2OverPi * (x + kCubic * x * x * x), t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kCubic * x * x);
}

// The cuBLASLt descriptors, kept inside the opaque structs the header defines (each sized for
// the library's own state).
struct Desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  std::int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  std::uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  std::int32_t bias_type = -1;
  const void* aux = nullptr;
  std::int64_t aux_ld = 0;
};
static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(Matrix) <= sizeof(cublasLtMatrixLayoutOpaque_t));

Desc& desc_of(cublasLtMatmulDesc_t d) { return *std::launder(reinterpret_cast<Desc*>(d->data)); }
Matrix& matrix_of(cublasLtMatrixLayout_t l) { return *std::launder(reinterpret_cast<Matrix*>(l->data)); }

// value = the attribute's bytes, when they are exactly its documented size.
template <typename V>
cublasStatus_t take(V& value, const void* buf, std::size_t size) {
  if (buf == nullptr || size != sizeof(V)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&value, buf, sizeof(V));
  return CUBLAS_STATUS_SUCCESS;
}

bool has(std::uint32_t epilogue, cublasLtEpilogue_t part) {
  return (epilogue & part) == static_cast<std::uint32_t>(part);
}

// Whether the descriptor and layouts describe a product cuBLASLt would run: D = op(A) op(B) with
// C and D alike, each ld at least its rows, and the epilogue's pointers and aux ld as the header
// documents them.
cublasStatus_t check_product(const Desc& d, const Matrix& a, const Matrix& b, const Matrix& c, const Matrix& dm) {
  const auto ta = static_cast<cublasOperation_t>(d.trans_a), tb = static_cast<cublasOperation_t>(d.trans_b);
  for (const Matrix* m : {&a, &b, &c, &dm})
    if (!supported(m->type) || m->ld < static_cast<std::int64_t>(m->rows) || m->ld < 1)
      return CUBLAS_STATUS_INVALID_VALUE;
  if (op_rows(a, ta) != dm.rows || op_cols(b, tb) != dm.cols || op_cols(a, ta) != op_rows(b, tb))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (c.rows != dm.rows || c.cols != dm.cols || c.type != dm.type) return CUBLAS_STATUS_INVALID_VALUE;
  switch (d.epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU: break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated
  }
  if (has(d.epilogue, CUBLASLT_EPILOGUE_BIAS)) {
    if (d.bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    if (d.bias_type != -1 && d.bias_type != dm.type) return CUBLAS_STATUS_INVALID_VALUE;  // D's type
  }
  if (d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d.epilogue == CUBLASLT_EPILOGUE_DGELU) {
    if (d.aux == nullptr || d.aux_ld % 8 != 0 || d.aux_ld < static_cast<std::int64_t>(dm.rows))
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, cudaDataType_t at, int lda,
                          cudaDataType_t bt, int ldb, cudaDataType_t ct, int ldc) {
  if (m < 0 || n < 0 || k < 0 || !supported(at) || at != bt || at != ct) return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k) || ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) ||
      ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

// C (m x n, ldc) = alpha op(A) op(B) + beta C, column-major, as cublasGemmEx.
void gemm_one(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void* a,
              cudaDataType_t at, int lda, const void* b, int ldb, float beta, void* c, int ldc) {
  const Matrix ma{at, static_cast<std::uint64_t>(ta == CUBLAS_OP_N ? m : k),
                  static_cast<std::uint64_t>(ta == CUBLAS_OP_N ? k : m), lda};
  const Matrix mb{at, static_cast<std::uint64_t>(tb == CUBLAS_OP_N ? k : n),
                  static_cast<std::uint64_t>(tb == CUBLAS_OP_N ? n : k), ldb};
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      const std::size_t at_c = static_cast<std::size_t>(i) + static_cast<std::size_t>(j) * ldc;
      double v = alpha * dot(ma, a, ta, mb, b, tb, static_cast<std::uint64_t>(k), i, j);
      if (beta != 0.0f) v += beta * load(at, c, at_c);  // beta = 0: C is not read (may be NaN)
      store(at, c, at_c, v);
    }
}

std::size_t element_bytes(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

// A handle or descriptor: a new T (zeroed), and its end.
template <typename T>
cublasStatus_t create(T** out) {
  *out = new T{};
  return CUBLAS_STATUS_SUCCESS;
}
template <typename T>
cublasStatus_t destroy(T* p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace scalelab::blas_emulation

using namespace scalelab::blas_emulation;

struct cublasContext {};
struct cublasLtContext {};

extern "C" {

// ---- cuBLAS ----
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) { return create(handle); }
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) { return destroy(handle); }
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* a, cudaDataType at, int lda, const void* b, cudaDataType bt,
                            int ldb, const void* beta, void* c, cudaDataType ct, int ldc, cublasComputeType_t,
                            cublasGemmAlgo_t) {
  if (const cublasStatus_t s = check_gemm(ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc); s != CUBLAS_STATUS_SUCCESS)
    return s;
  ++controls().gemms;
  gemm_one(ta, tb, m, n, k, *static_cast<const float*>(alpha), a, at, lda, b, ldb, *static_cast<const float*>(beta), c,
           ldc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* a, cudaDataType at, int lda,
                                          long long stride_a, const void* b, cudaDataType bt, int ldb,
                                          long long stride_b, const void* beta, void* c, cudaDataType ct, int ldc,
                                          long long stride_c, int batch, cublasComputeType_t, cublasGemmAlgo_t) {
  if (const cublasStatus_t s = check_gemm(ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc); s != CUBLAS_STATUS_SUCCESS)
    return s;
  if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  ++controls().gemms;
  const std::size_t bytes = element_bytes(at);
  for (int p = 0; p < batch; ++p)
    gemm_one(ta, tb, m, n, k, *static_cast<const float*>(alpha),
             static_cast<const char*>(a) + p * stride_a * static_cast<long long>(bytes), at, lda,
             static_cast<const char*>(b) + p * stride_b * static_cast<long long>(bytes), ldb,
             *static_cast<const float*>(beta), static_cast<char*>(c) + p * stride_c * static_cast<long long>(bytes),
             ldc);
  return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLASLt ----
cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) { return create(handle); }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) { return destroy(handle); }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated
  create(desc);
  new ((*desc)->data) Desc{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { return destroy(desc); }
// Each attribute with the type its documentation gives it; another size is refused, as there.
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                                              const void* buf, size_t size) {
  Desc& d = desc_of(desc);
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return take(d.trans_a, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB: return take(d.trans_b, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return take(d.epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return take(d.bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return take(d.bias_type, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return take(d.aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return take(d.aux_ld, buf, size);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  create(layout);
  new ((*layout)->data) Matrix{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) { return destroy(layout); }

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) { return create(pref); }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) { return destroy(pref); }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                    cublasLtMatmulPreferenceAttributes_t attribute, const void* buf,
                                                    size_t size) {
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: {
      std::uint64_t bytes = 0;
      return take(bytes, buf, size);
    }
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
      std::uint32_t bytes = 0;
      return take(bytes, buf, size);
    }
    default: return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated
  }
}

// One "algorithm" for every product the emulation can run (its first word marks it as ours).
constexpr std::uint64_t kAlgoMark = 0x5ca1ab1e;
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* found) {
  ++controls().heuristic_calls;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (const cublasStatus_t s = check_product(desc_of(desc), matrix_of(a), matrix_of(b), matrix_of(c), matrix_of(d));
      s != CUBLAS_STATUS_SUCCESS)
    return s;
  *found = 0;
  if (controls().heuristic_finds_none) return CUBLAS_STATUS_NOT_SUPPORTED;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo.data[0] = kAlgoMark;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// D = epilogue(alpha op(A) op(B) + beta C), column-major; the epilogues:
//   BIAS           + bias[i] (one value per row of D)
//   GELU_AUX_BIAS  aux(i, j) = that sum (rounded to D's type), D = gelu(sum)
//   DGELU          D = sum * gelu'(aux(i, j))
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                              cublasLtMatrixLayout_t la, const void* b, cublasLtMatrixLayout_t lb, const void* beta,
                              const void* c, cublasLtMatrixLayout_t lc, void* d, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t) {
  const Desc& o = desc_of(desc);
  const Matrix &ma = matrix_of(la), &mb = matrix_of(lb), &mc = matrix_of(lc), &md = matrix_of(ld);
  if (const cublasStatus_t s = check_product(o, ma, mb, mc, md); s != CUBLAS_STATUS_SUCCESS) return s;
  if (algo == nullptr || algo->data[0] != kAlgoMark) return CUBLAS_STATUS_INVALID_VALUE;
  if (controls().lt_matmul_not_supported) return CUBLAS_STATUS_NOT_SUPPORTED;
  ++controls().lt_matmuls;
  const auto ta = static_cast<cublasOperation_t>(o.trans_a), tb = static_cast<cublasOperation_t>(o.trans_b);
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const std::uint64_t k = op_cols(ma, ta);
  // All of D from the inputs first: D may be C (in place).
  std::vector<double> out(md.rows * md.cols);
  for (std::uint64_t j = 0; j < md.cols; ++j)
    for (std::uint64_t i = 0; i < md.rows; ++i) {
      double v = al * dot(ma, a, ta, mb, b, tb, k, i, j);
      if (be != 0.0f) v += be * load(mc.type, c, i + j * static_cast<std::uint64_t>(mc.ld));
      const std::uint64_t aux_at = i + j * static_cast<std::uint64_t>(o.aux_ld);
      switch (o.epilogue) {
        case CUBLASLT_EPILOGUE_BIAS: v += load(md.type, o.bias, i); break;
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
          v += load(md.type, o.bias, i);
          store(md.type, const_cast<void*>(o.aux), aux_at, v);
          v = gelu(v);
          break;
        case CUBLASLT_EPILOGUE_DGELU: v *= gelu_slope(load(md.type, o.aux, aux_at)); break;
        default: break;
      }
      out[i + j * md.rows] = v;
    }
  for (std::uint64_t j = 0; j < md.cols; ++j)
    for (std::uint64_t i = 0; i < md.rows; ++i)
      store(md.type, d, i + j * static_cast<std::uint64_t>(md.ld), out[i + j * md.rows]);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
