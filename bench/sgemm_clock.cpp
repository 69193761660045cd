// The cblas_sgemm interposer behind sgemm_clock.hpp (see there for why and how).
#include "sgemm_clock.hpp"

#include <cblas.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace scalelab::bench {
namespace {

// The running totals. A benchmark-only accumulator (one thread), not configuration.
SgemmTotals totals;

using SgemmFn = void (*)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE, const blasint,
                         const blasint, const blasint, const float, const float*, const blasint, const float*,
                         const blasint, const float, float*, const blasint);

// OpenBLAS's cblas_sgemm: the next definition after ours in the lookup order.
SgemmFn real_sgemm() {
  static const SgemmFn fn = [] {
    auto* f = reinterpret_cast<SgemmFn>(dlsym(RTLD_NEXT, "cblas_sgemm"));
    if (f == nullptr) {
      std::fprintf(stderr, "bench_step: cannot find OpenBLAS's cblas_sgemm behind the timer: %s\n", dlerror());
      std::abort();
    }
    return f;
  }();
  return fn;
}

}  // namespace

SgemmTotals sgemm_totals() { return totals; }
void reset_sgemm_totals() { totals = {}; }

}  // namespace scalelab::bench

extern "C" void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta, const enum CBLAS_TRANSPOSE tb,
                            const blasint m, const blasint n, const blasint k, const float alpha, const float* a,
                            const blasint lda, const float* b, const blasint ldb, const float beta, float* c,
                            const blasint ldc) {
  using namespace scalelab::bench;
  const auto fn = real_sgemm();
  const auto t0 = std::chrono::steady_clock::now();
  fn(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  totals.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  totals.flops += 2.0 * m * n * k;
  totals.calls += 1;
}
