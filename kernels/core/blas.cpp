// The cuBLAS handle, its workspace, and the row-major gemm wrappers.
#include "kernels/core/blas.hpp"

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "kernels/core/dtype.hpp"

namespace scalelab::cuda {

Blas::Blas(cudaStream_t stream, MemoryTracker* tracker, bool allow_tf32)
    : stream_(stream), allow_tf32_(allow_tf32), workspace_(kWorkspaceBytes, MemCategory::kWorkspace, tracker) {
  SCALELAB_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    SCALELAB_CUBLAS_CHECK(cublasLtCreate(&lt_handle_));
    SCALELAB_CUBLAS_CHECK(cublasSetStream(handle_, stream_));
    // Our workspace (counted by the tracker) instead of one cuBLAS would allocate on its own.
    SCALELAB_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.data(), workspace_.bytes()));
    // Reductions inside a product (split-K) stay in fp32 even for half inputs.
    SCALELAB_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  } catch (...) {
    if (lt_handle_) cublasLtDestroy(lt_handle_);
    cublasDestroy(handle_);
    throw;
  }
}

std::optional<cublasLtMatmulAlgo_t>& Blas::lt_algorithm(
    const LtKey& key, const std::function<std::optional<cublasLtMatmulAlgo_t>()>& ask) const {
  const auto found = lt_algorithms_.find(key);
  if (found != lt_algorithms_.end()) return found->second;
  return lt_algorithms_[key] = ask();  // std::map: the entry stays where it is as others are added
}

Blas::~Blas() {
  if (lt_handle_) cublasLtDestroy(lt_handle_);
  if (handle_) cublasDestroy(handle_);
}

namespace {
cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

template <typename T>
cublasComputeType_t compute_type(const Blas& blas) {
  // fp32 accumulation always; TF32 inputs only for fp32 data and only when allowed.
  if constexpr (sizeof(T) == sizeof(float)) {
    if (blas.allow_tf32()) return CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  return CUBLAS_COMPUTE_32F;
}
}  // namespace

template <typename T>
void gemm(const Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const T* a, int lda,
          const T* b, int ldb, float beta, T* c, int ldc) {
  if (m == 0 || n == 0) return;
  const cudaDataType_t t = DType<T>::cuda_type;
  // Row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T (see the header).
  SCALELAB_CUBLAS_CHECK(cublasGemmEx(blas.handle(), op(trans_b), op(trans_a), n, m, k, &alpha, b, t, ldb, a, t, lda,
                                     &beta, c, t, ldc, compute_type<T>(blas), CUBLAS_GEMM_DEFAULT));
}

template <typename T>
void gemm_strided_batched(const Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const T* a,
                          int lda, long long stride_a, const T* b, int ldb, long long stride_b, float beta, T* c,
                          int ldc, long long stride_c, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  const cudaDataType_t t = DType<T>::cuda_type;
  SCALELAB_CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas.handle(), op(trans_b), op(trans_a), n, m, k, &alpha, b, t, ldb,
                                                   stride_b, a, t, lda, stride_a, &beta, c, t, ldc, stride_c, batch,
                                                   compute_type<T>(blas), CUBLAS_GEMM_DEFAULT));
}

namespace {

// cuBLASLt's descriptors, each destroyed with its own function when the product is done.
struct LtDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using OpDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtDeleter>;

// A column-major matrix of `rows` x `cols` stored with leading dimension ld.
Layout layout(cudaDataType_t type, int rows, int cols, int ld) {
  cublasLtMatrixLayout_t l = nullptr;
  SCALELAB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld));
  return Layout(l);
}

template <typename V>
void set(const OpDesc& desc, cublasLtMatmulDescAttributes_t attribute, const V& value) {
  SCALELAB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.get(), attribute, &value, sizeof value));
}

// The largest power of two (up to 256) that divides a pointer: the preference below tells
// cuBLASLt's heuristic how aligned each matrix is, which it cannot see (it gets no pointers to the
// matrices), so that it picks no kernel that needs more than the model's offsets give.
std::uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t bytes = 256;
  while (bytes > 1 && address % bytes != 0) bytes /= 2;
  return bytes;
}

cublasLtEpilogue_t lt_epilogue(Epilogue kind) {
  switch (kind) {
    case Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGeluBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

}  // namespace

template <typename T>
bool gemm_epilogue(const Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, const T* a, int lda, const T* b,
                   int ldb, T* c, int ldc, const EpilogueArgs<T>& epilogue) {
  static_assert(!std::is_same_v<T, float>, "the fused products are for bf16 and fp16");
  if (m == 0 || n == 0) return true;
  if (epilogue.kind != Epilogue::kBias && epilogue.ld_aux % 8 != 0) return false;  // cuBLASLt's rule for aux
  const cudaDataType_t t = DType<T>::cuda_type;
  // As in gemm(): the row-major C (m,n) = op(A) op(B) is the column-major C^T (n,m) = op(B)^T
  // op(A)^T, so cuBLASLt's first matrix is b and its second a. C^T's rows are C's columns, so
  // the bias (one value per column of C) is one value per row of cuBLASLt's D, which is what
  // its epilogues broadcast; aux has D's layout.
  cublasLtMatmulDesc_t raw = nullptr;
  SCALELAB_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const OpDesc desc(raw);
  set(desc, CUBLASLT_MATMUL_DESC_TRANSA, op(trans_b));
  set(desc, CUBLASLT_MATMUL_DESC_TRANSB, op(trans_a));
  set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(epilogue.kind));
  if (epilogue.kind != Epilogue::kDGelu) {
    set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(epilogue.bias));
    set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<std::int32_t>(t));
  }
  const void* aux = epilogue.kind == Epilogue::kGeluBias ? static_cast<const void*>(epilogue.aux_out)
                                                         : static_cast<const void*>(epilogue.aux_in);
  if (epilogue.kind != Epilogue::kBias) {
    set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<std::int64_t>(epilogue.ld_aux));
  }
  // Stored shapes (before op): b is (n,k) if transposed else (k,n) in row-major, i.e. column-major
  // (k,n) or (n,k); the same for a with m.
  const Layout lb = trans_b ? layout(t, k, n, ldb) : layout(t, n, k, ldb);
  const Layout la = trans_a ? layout(t, m, k, lda) : layout(t, k, m, lda);
  const Layout lc = layout(t, n, m, ldc);

  const std::size_t workspace = blas.workspace_bytes();
  const auto ask = [&]() -> std::optional<cublasLtMatmulAlgo_t> {
    cublasLtMatmulPreference_t raw_pref = nullptr;
    SCALELAB_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
    const Preference pref(raw_pref);
    SCALELAB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                               &workspace, sizeof workspace));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> matrices[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, c}};
    for (const auto& [attribute, pointer] : matrices) {
      const std::uint32_t bytes = alignment(pointer);
      SCALELAB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), attribute, &bytes, sizeof bytes));
    }
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(blas.lt_handle(), desc.get(), lb.get(), la.get(),
                                                                 lc.get(), lc.get(), pref.get(), 1, &heuristic, &found);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) return std::nullopt;
    return heuristic.algo;
  };
  const Blas::LtKey key = {t,
                           static_cast<int>(epilogue.kind),
                           trans_a,
                           trans_b,
                           m,
                           n,
                           k,
                           lda,
                           ldb,
                           ldc,
                           epilogue.ld_aux,
                           alignment(a),
                           alignment(b),
                           alignment(c),
                           alignment(epilogue.bias),
                           alignment(aux)};
  std::optional<cublasLtMatmulAlgo_t>& algo = blas.lt_algorithm(key, ask);
  if (!algo) return false;  // nothing fuses this: the caller runs its kernels
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t status = cublasLtMatmul(blas.lt_handle(), desc.get(), &alpha, b, lb.get(), a, la.get(), &beta, c,
                                               lc.get(), c, lc.get(), &*algo, blas.workspace(), workspace,
                                               blas.stream());
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) {  // offered by the heuristic, refused by the library
    algo.reset();  // nothing was launched: the unfused kernels run, now and for later calls
    return false;
  }
  SCALELAB_CUBLAS_CHECK(status);
  return true;
}

template bool gemm_epilogue<bf16>(const Blas&, bool, bool, int, int, int, const bf16*, int, const bf16*, int, bf16*,
                                  int, const EpilogueArgs<bf16>&);
template bool gemm_epilogue<fp16>(const Blas&, bool, bool, int, int, int, const fp16*, int, const fp16*, int, fp16*,
                                  int, const EpilogueArgs<fp16>&);

#define SCALELAB_INSTANTIATE(T)                                                                                       \
  template void gemm<T>(const Blas&, bool, bool, int, int, int, float, const T*, int, const T*, int, float, T*, int); \
  template void gemm_strided_batched<T>(const Blas&, bool, bool, int, int, int, float, const T*, int, long long,      \
                                        const T*, int, long long, float, T*, int, long long, int);
SCALELAB_INSTANTIATE(float)
SCALELAB_INSTANTIATE(bf16)
SCALELAB_INSTANTIATE(fp16)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
