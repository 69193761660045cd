// The matrix product of core/blas.hpp through the library SCALELAB_BLAS chose, its thread
// control, and the one-time set-up BLIS needs.
#include "core/blas.hpp"

#include <cblas.h>
#include <cpuid.h>

#include <atomic>
#include <cstdlib>

#include "core/error.hpp"

#if defined(SCALELAB_BLAS_ONEDNN)
#include <dnnl.h>
extern "C" void omp_set_num_threads(int);  // Debian's oneDNN runs on OpenMP threads
extern "C" int omp_get_max_threads();
#endif
#if defined(SCALELAB_BLAS_BLIS)
#include <blis.h>
#include <string>
#else
extern "C" void openblas_set_num_threads(int);
#endif

namespace scalelab {
namespace {

#if defined(SCALELAB_BLAS_ONEDNN)
// set_blas_threads's n (0: OpenMP's default). OpenMP's thread count belongs to the thread that
// sets it, so each product applies it on its own thread: the setting holds for the whole process,
// as openblas_set_num_threads's does.
std::atomic<int> onednn_threads{0};
#endif

#if defined(SCALELAB_BLAS_BLIS)
// BLIS 0.9.0 (Debian 12) knows AMD CPU families up to 0x19 (Zen 3/4); on a later family (Zen 5 is
// 0x1A) it falls back to its generic C kernels, about 6x slower. There, unless the user chose
// with BLIS_ARCH_TYPE (a number: BLIS's arch_t), take its AVX-512 kernels (skx) where the CPU
// has AVX-512, else its newest AMD ones (zen3: AVX2 + FMA); on this machine class skx measured
// the faster of the two. This must run before BLIS's first call, which is when BLIS reads the
// variable: every function here that calls BLIS calls it first.
void blis_choose_kernels_once() {
  static const bool done = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (std::getenv("BLIS_ARCH_TYPE") != nullptr || __get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return true;
    const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;  // "AuthenticAMD"
    __get_cpuid(1, &eax, &ebx, &ecx, &edx);
    const unsigned family = ((eax >> 8) & 0xf) + ((eax >> 20) & 0xff);
    if (!amd || family <= 0x19) return true;
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx512 || avx2) {
      setenv("BLIS_ARCH_TYPE", std::to_string(static_cast<int>(avx512 ? BLIS_ARCH_SKX : BLIS_ARCH_ZEN3)).c_str(), 0);
    }
    return true;
  }();
  (void)done;
}
#endif

}  // namespace

template <typename F>
void gemm(bool trans_a, bool trans_b, int m, int n, int k, F alpha, const F* a, int lda, const F* b, int ldb, F beta,
          F* c, int ldc) {
#if defined(SCALELAB_BLAS_ONEDNN)
  if constexpr (sizeof(F) == sizeof(float)) {
    if (m == 0 || n == 0) return;
    if (const int t = onednn_threads.load(std::memory_order_relaxed); t > 0 && omp_get_max_threads() != t) {
      omp_set_num_threads(t);
    }
    const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                                            beta, c, ldc);
    SCALELAB_CHECK(status == dnnl_success, "dnnl_sgemm failed (status ", static_cast<int>(status), ") for m=", m,
                   " n=", n, " k=", k);
    return;
  }
#elif defined(SCALELAB_BLAS_BLIS)
  blis_choose_kernels_once();
#endif
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (sizeof(F) == sizeof(float)) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

template void gemm<float>(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int);
template void gemm<double>(bool, bool, int, int, int, double, const double*, int, const double*, int, double, double*,
                           int);

void set_blas_threads(int n) {
  if (n <= 0) return;
#if defined(SCALELAB_BLAS_BLIS)
  blis_choose_kernels_once();
  bli_thread_set_num_threads(n);
#else
  openblas_set_num_threads(n);  // float with openblas; double with openblas and onednn
#endif
#if defined(SCALELAB_BLAS_ONEDNN)
  onednn_threads.store(n, std::memory_order_relaxed);
#endif
}

const char* blas_name() {
#if defined(SCALELAB_BLAS_ONEDNN)
  return "oneDNN";
#elif defined(SCALELAB_BLAS_BLIS)
  return "BLIS";
#else
  return "OpenBLAS";
#endif
}

}  // namespace scalelab
