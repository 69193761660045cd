// kernels/core/blas.cpp on the CPU, linked with the emulated cuBLAS and cuBLASLt
// (blas_emulation.hpp) instead of the real libraries: its row-major products against the CPU
// twin. gemm and gemm_strided_batched have run on GPUs; gemm_epilogue (the linear layers' bias
// and the MLP's GELU inside the product, through cuBLASLt) had only been compiled. Checked here:
// which matrix goes first, the transposes and leading dimensions, the bias along the right
// dimension, aux written and read in C's layout, the cached algorithm, and the fallbacks (no
// algorithm; one the library then refuses) that leave everything untouched for the unfused
// kernels. The epilogue calls are those kernels/layers/matmul.cu makes (fused_forward and
// matmul_gelu_backward).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "blas_emulation.hpp"
#include "core/rng.hpp"
#include "host_tensor.hpp"
#include "kernel_checks.hpp"
#include "kernels/core/blas.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/matmul.hpp"

namespace {

using namespace scalelab_simt_test;
namespace cuda = scalelab::cuda;
namespace emu = scalelab::blas_emulation;

// Row-major C (m,n) = op(A) op(B), rows lda/ldb/ldc apart, in double: the definition gemm()'s
// header gives, written out.
std::vector<float> product(bool ta, bool tb, int m, int n, int k, const std::vector<float>& a, int lda,
                           const std::vector<float>& b, int ldb, int ldc) {
  std::vector<float> c(static_cast<std::size_t>(m) * ldc, 0.0f);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int l = 0; l < k; ++l)
        s += static_cast<double>(ta ? a[static_cast<std::size_t>(l) * lda + i]
                                    : a[static_cast<std::size_t>(i) * lda + l]) *
             (tb ? b[static_cast<std::size_t>(j) * ldb + l] : b[static_cast<std::size_t>(l) * ldb + j]);
      c[static_cast<std::size_t>(i) * ldc + j] = static_cast<float>(s);
    }
  return c;
}

TEMPLATE_TEST_CASE("emulated cuBLAS: gemm's row-major products, every transpose, rows further apart than they are long",
                   "[simt][blas]", float, bf16, fp16) {
  using F = TestType;
  cuda::Blas blas(nullptr, nullptr, false);
  const int m = 7, n = 5, k = 9;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      const std::string label = std::string(dtype_name<F>()) + " A" + (ta ? "^T" : "") + " B" + (tb ? "^T" : "");
      scalelab::Rng rng(seed_for(label));
      // Stored shapes: A (m,k) or (k,m), B (k,n) or (n,k); each row 3 elements longer than needed.
      const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 3, ldc = n + 3;
      const std::vector<float> a = random_inputs<F>(static_cast<std::size_t>(ta ? k : m) * lda, rng, -1.0f, 1.0f);
      const std::vector<float> b = random_inputs<F>(static_cast<std::size_t>(tb ? n : k) * ldb, rng, -1.0f, 1.0f);
      const std::vector<F> a_t = to_tensor<F>(a), b_t = to_tensor<F>(b);
      std::vector<F> c_t = to_tensor<F>(std::vector<float>(static_cast<std::size_t>(m) * ldc, 0.5f));
      cuda::gemm<F>(blas, ta, tb, m, n, k, 1.0f, a_t.data(), lda, b_t.data(), ldb, 1.0f, c_t.data(), ldc);
      std::vector<float> want = product(ta, tb, m, n, k, a, lda, b, ldb, ldc);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < ldc; ++j) want[static_cast<std::size_t>(i) * ldc + j] += 0.5f;  // beta = 1: C added
      for (int i = 0; i < m; ++i)  // the padding of each row is not written: it keeps its 0.5
        for (int j = n; j < ldc; ++j) want[static_cast<std::size_t>(i) * ldc + j] = 0.5f;
      check_close("gemm " + label, widen(c_t), want, rel_tolerance<F>());
    }
}

TEST_CASE("emulated cuBLAS: gemm_strided_batched's products, one per head as attention uses them", "[simt][blas]") {
  // Attention's scores: for each head h, att (T,T) = q_h (T,hs) @ k_h^T, where q and k are
  // the head's hs columns of rows 3C apart (qkv's layout), heads hs columns apart.
  cuda::Blas blas(nullptr, nullptr, false);
  const int T = 6, NH = 3, hs = 4, C = NH * hs;
  scalelab::Rng rng(7);
  const std::vector<float> qkv = random_inputs<float>(static_cast<std::size_t>(T) * 3 * C, rng, -1.0f, 1.0f);
  std::vector<float> att(static_cast<std::size_t>(NH) * T * T, -1.0f);
  cuda::gemm_strided_batched<float>(blas, false, true, T, T, hs, 1.0f, qkv.data(), 3 * C, hs, qkv.data() + C, 3 * C, hs,
                                    0.0f, att.data(), T, static_cast<long long>(T) * T, NH);
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j) {
        double s = 0;
        for (int d = 0; d < hs; ++d)
          s += static_cast<double>(qkv[static_cast<std::size_t>(i) * 3 * C + h * hs + d]) *
               qkv[static_cast<std::size_t>(j) * 3 * C + C + h * hs + d];
        INFO("head " << h << " (" << i << ", " << j << ")");
        CHECK(att[(static_cast<std::size_t>(h) * T + i) * T + j] == Approx(s).epsilon(1e-6));
      }
}

// A linear layer's inputs in F: inp (N,C), weight (OC,C), bias (OC), and dout (N,OC).
struct Linear {
  int N, C, OC;
  std::vector<float> inp, weight, bias, dout;
};
template <typename F>
Linear linear(int N, int C, int OC, const std::string& label) {
  scalelab::Rng rng(seed_for(label));
  Linear l{N, C, OC, {}, {}, {}, {}};
  l.inp = random_inputs<F>(static_cast<std::size_t>(N) * C, rng, -1.0f, 1.0f);
  l.weight = random_inputs<F>(static_cast<std::size_t>(OC) * C, rng, -0.5f, 0.5f);
  l.bias = random_inputs<F>(static_cast<std::size_t>(OC), rng, -0.5f, 0.5f);
  l.dout = random_inputs<F>(static_cast<std::size_t>(N) * OC, rng, -1.0f, 1.0f);
  return l;
}

// The call of matmul.cu's fused_forward: out (N,OC) = inp @ weight^T with the epilogue.
template <typename F>
bool fused_forward(const cuda::Blas& blas, const Linear& l, const std::vector<F>& inp, const std::vector<F>& weight,
                   std::vector<F>& out, const cuda::EpilogueArgs<F>& epilogue) {
  return cuda::gemm_epilogue<F>(blas, false, true, l.N, l.OC, l.C, inp.data(), l.C, weight.data(), l.C, out.data(),
                                l.OC, epilogue);
}

TEMPLATE_TEST_CASE("emulated cuBLASLt: the fused bias, GELU and GELU-gradient products match the CPU twin",
                   "[simt][blas]", bf16, fp16) {
  using F = TestType;
  // Shapes off every tile: N rows not a multiple of 8; C and OC multiples of 8 (aux's leading
  // dimension must be) and not.
  struct Shape {
    int N, C, OC;
  };
  for (const auto [N, C, OC] : std::vector<Shape>{{5, 16, 24}, {13, 24, 40}, {9, 12, 20}}) {
    const std::string label = std::string(dtype_name<F>()) + " N=" + std::to_string(N) + " C=" + std::to_string(C) +
                              " OC=" + std::to_string(OC);
    const Linear l = linear<F>(N, C, OC, label);
    const std::vector<F> inp = to_tensor<F>(l.inp), weight = to_tensor<F>(l.weight), bias = to_tensor<F>(l.bias);
    const std::vector<F> dout = to_tensor<F>(l.dout);
    const std::size_t NC = static_cast<std::size_t>(N) * C, NOC = static_cast<std::size_t>(N) * OC;
    cuda::Blas blas(nullptr, nullptr, false);

    // The CPU twin: pre = inp @ weight^T + bias, rounded to F; out = gelu(pre).
    std::vector<float> pre(NOC), out(NOC);
    scalelab::matmul_forward(pre.data(), l.inp.data(), l.weight.data(), l.bias.data(), N, C, OC);
    round_to<F>(pre);
    scalelab::gelu_forward(out.data(), pre.data(), NOC);

    // kBias: the linear layers' forward.
    std::vector<F> got(NOC);
    poison(got);
    REQUIRE(fused_forward<F>(blas, l, inp, weight, got, {.kind = cuda::Epilogue::kBias, .bias = bias.data()}));
    check_close("bias epilogue " + label, widen(got), pre, rel_tolerance<F>());

    // kGeluBias: the MLP's fc layer; aux gets the pre-activation, in out's layout.
    const bool aux_ok = OC % 8 == 0;
    std::vector<F> aux(NOC);
    poison(aux);
    poison(got);
    const cuda::EpilogueArgs<F> gelu{
        .kind = cuda::Epilogue::kGeluBias, .bias = bias.data(), .aux_out = aux.data(), .ld_aux = OC};
    REQUIRE(fused_forward<F>(blas, l, inp, weight, got, gelu) == aux_ok);
    if (aux_ok) {
      check_close("GELU epilogue " + label + " out", widen(got), out, rel_tolerance<F>());
      check_close("GELU epilogue " + label + " aux (the pre-activation)", widen(aux), pre, rel_tolerance<F>());
    } else {  // refused by blas.cpp before the library: nothing written, for the unfused kernels
      CHECK(std::isnan(widen(got)[0]));
      CHECK(std::isnan(widen(aux)[0]));
    }

    // kDGelu: matmul_gelu_backward's product. Here the layer runs the other way (OC -> C): its
    // input gradient dpre (N,C) = (dout (N,OC) @ weight (OC,C)) * gelu'(x), x (N,C) the
    // pre-activation of its input (here inp).
    std::vector<float> dx(NC), dw(static_cast<std::size_t>(OC) * C, 0.0f), dpre(NC);
    scalelab::matmul_backward(dx.data(), dw.data(), static_cast<float*>(nullptr), l.dout.data(), l.inp.data(),
                              l.weight.data(), N, C, OC);
    scalelab::gelu_backward(dpre.data(), dx.data(), l.inp.data(), NC);
    std::vector<F> got_d(NC);
    poison(got_d);
    const cuda::EpilogueArgs<F> dgelu{.kind = cuda::Epilogue::kDGelu, .aux_in = inp.data(), .ld_aux = C};
    const bool ok = cuda::gemm_epilogue<F>(blas, false, false, N, C, OC, dout.data(), OC, weight.data(), C,
                                           got_d.data(), C, dgelu);
    REQUIRE(ok == (C % 8 == 0));
    if (ok) check_close("GELU-gradient epilogue " + label, widen(got_d), dpre, rel_tolerance<F>());
  }
}

TEST_CASE("emulated cuBLASLt: the algorithm is asked for once per product, and a refusal falls back untouched",
          "[simt][blas]") {
  using F = bf16;
  const Linear l = linear<F>(9, 16, 24, "fallbacks");
  const std::vector<F> inp = to_tensor<F>(l.inp), weight = to_tensor<F>(l.weight), bias = to_tensor<F>(l.bias);
  const cuda::EpilogueArgs<F> with_bias{.kind = cuda::Epilogue::kBias, .bias = bias.data()};
  std::vector<F> out(static_cast<std::size_t>(l.N) * l.OC);
  emu::Controls& c = emu::controls();
  c = emu::Controls{};

  SECTION("the heuristic once per description; a new pointer alignment is a new description") {
    cuda::Blas blas(nullptr, nullptr, false);
    for (int i = 0; i < 3; ++i) REQUIRE(fused_forward<F>(blas, l, inp, weight, out, with_bias));
    CHECK(c.heuristic_calls == 1);
    CHECK(c.lt_matmuls == 3);
    // The same product from an input one element (2 bytes) further on: its alignment differs.
    std::vector<F> shifted(inp.size() + 1);
    std::copy(inp.begin(), inp.end(), shifted.begin() + 1);
    REQUIRE(cuda::gemm_epilogue<F>(blas, false, true, l.N, l.OC, l.C, shifted.data() + 1, l.C, weight.data(), l.C,
                                   out.data(), l.OC, with_bias));
    CHECK(c.heuristic_calls == 2);
  }
  SECTION("no algorithm: false, nothing written, and not asked again") {
    cuda::Blas blas(nullptr, nullptr, false);
    c.heuristic_finds_none = true;
    poison(out);
    for (int i = 0; i < 2; ++i) REQUIRE_FALSE(fused_forward<F>(blas, l, inp, weight, out, with_bias));
    CHECK(c.heuristic_calls == 1);
    CHECK(c.lt_matmuls == 0);
    CHECK(std::isnan(widen(out)[0]));
  }
  SECTION("an algorithm the library then refuses: false, nothing written, and struck from the cache") {
    cuda::Blas blas(nullptr, nullptr, false);
    c.lt_matmul_not_supported = true;
    poison(out);
    REQUIRE_FALSE(fused_forward<F>(blas, l, inp, weight, out, with_bias));
    c.lt_matmul_not_supported = false;  // even if it would run now, the struck entry says no
    REQUIRE_FALSE(fused_forward<F>(blas, l, inp, weight, out, with_bias));
    CHECK(c.heuristic_calls == 1);
    CHECK(c.lt_matmuls == 0);
    CHECK(std::isnan(widen(out)[0]));
  }
  c = emu::Controls{};
}

}  // namespace
