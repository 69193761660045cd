// The sgemm interposer behind sgemm_clock.hpp (see there for why and how). It takes the place of
// the float product core/blas.hpp calls in this build: dnnl_sgemm (SCALELAB_BLAS=onednn) or
// cblas_sgemm (openblas, blis).
#include "sgemm_clock.hpp"

#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#if defined(SCALELAB_BLAS_ONEDNN)
#include <dnnl.h>
#else
#include <cblas.h>
#endif

namespace scalelab::bench {
namespace {

// The running totals. A benchmark-only accumulator (one thread), not configuration.
SgemmTotals totals;

// The library's own function of that name: the next definition after ours in the lookup order.
template <typename Fn>
Fn real(const char* name) {
  auto* f = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
  if (f == nullptr) {
    std::fprintf(stderr, "bench_step: cannot find the library's %s behind the timer: %s\n", name, dlerror());
    std::abort();
  }
  return f;
}

// Times one call of the library's function and adds it to the totals.
template <typename Call>
void timed(double m, double n, double k, Call call) {
  const auto t0 = std::chrono::steady_clock::now();
  call();
  totals.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  totals.flops += 2.0 * m * n * k;
  totals.calls += 1;
}

}  // namespace

SgemmTotals sgemm_totals() { return totals; }
void reset_sgemm_totals() { totals = {}; }

}  // namespace scalelab::bench

#if defined(SCALELAB_BLAS_ONEDNN)
extern "C" dnnl_status_t dnnl_sgemm(char ta, char tb, dnnl_dim_t m, dnnl_dim_t n, dnnl_dim_t k, float alpha,
                                    const float* a, dnnl_dim_t lda, const float* b, dnnl_dim_t ldb, float beta,
                                    float* c, dnnl_dim_t ldc) {
  using namespace scalelab::bench;
  // dnnl_version: a second symbol of libdnnl.so that this executable uses, so that the linker
  // (--as-needed) keeps the library, whose one other symbol used here, dnnl_sgemm, is ours.
  static const bool linked = dnnl_version() != nullptr;
  (void)linked;
  using Fn = dnnl_status_t (*)(char, char, dnnl_dim_t, dnnl_dim_t, dnnl_dim_t, float, const float*, dnnl_dim_t,
                               const float*, dnnl_dim_t, float, float*, dnnl_dim_t);
  static const Fn fn = real<Fn>("dnnl_sgemm");
  dnnl_status_t status = dnnl_success;
  timed(m, n, k, [&] { status = fn(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
  return status;
}
#else
// The integer type of the header's own declaration (OpenBLAS: blasint; BLIS: f77_int).
using BlasInt = int;
extern "C" void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta, const enum CBLAS_TRANSPOSE tb,
                            const BlasInt m, const BlasInt n, const BlasInt k, const float alpha, const float* a,
                            const BlasInt lda, const float* b, const BlasInt ldb, const float beta, float* c,
                            const BlasInt ldc) {
  using namespace scalelab::bench;
  using Fn = void (*)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE, BlasInt, BlasInt,
                      BlasInt, float, const float*, BlasInt, const float*, BlasInt, float, float*, BlasInt);
  static const Fn fn = real<Fn>("cblas_sgemm");
  timed(m, n, k, [&] { fn(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
}
#endif
