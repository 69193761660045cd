// Every layer's backward (double instantiation) against central finite differences of its
// forward, on sizes that are not multiples of anything (B=2, T=5, C=12, NH=3, V=7, N=B*T).
// Tolerance: worst |backward - finite difference| <= 1e-6 x the largest gradient of that input
// (central differences with h = 1e-6 in double are accurate to ~1e-9 here).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "compare.hpp"
#include "gradcheck.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/crossentropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/matmul.hpp"
#include "model/layers/residual.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {
constexpr int B = 2, T = 5, C = 12, NH = 3, V = 7, N = B * T;
constexpr double kTol = 1e-6;

// Guard values after a buffer's n elements, which an element-wise backward must leave alone.
constexpr std::size_t kGuards = 4;
constexpr double kGuard = 7.5;
}  // namespace

TEST_CASE("encoder_backward matches finite differences", "[graded][fd_encoder]") {
  const std::vector<int> tokens = {0, 3, 3, 6, 1, 2, 2, 5, 0, 6};  // repeats: rows accumulate
  Vec wte = random_vec(V * C, 1), wpe = random_vec(T * C, 2), w = random_vec(N * C, 3);
  Vec out(N * C);
  auto objective = [&] {
    encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, w);
  };
  const Vec dwte0 = random_vec(V * C, 31), dwpe0 = random_vec(T * C, 32);  // they accumulate (+=)
  Vec dwte = dwte0, dwpe = dwpe0;
  encoder_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C);
  CHECK_FD(check_fd(wte, added(dwte, dwte0), objective, kTol), "dwte (what the backward added)");
  CHECK_FD(check_fd(wpe, added(dwpe, dwpe0), objective, kTol), "dwpe (what the backward added)");
}

TEST_CASE("layernorm_backward matches finite differences and accumulates", "[graded][fd_layernorm]") {
  Vec inp = random_vec(N * C, 4, 2.0), weight = random_vec(C, 5), bias = random_vec(C, 6), w = random_vec(N * C, 7);
  Vec out(N * C), mean(N), rstd(N);
  auto objective = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
    return dot(out, w);
  };
  objective();
  // dinp, dweight and dbias accumulate (+=): start from non-zero buffers, check what was added.
  const Vec dinp0 = random_vec(N * C, 33), dweight0 = random_vec(C, 34), dbias0 = random_vec(C, 35);
  Vec dinp = dinp0, dweight = dweight0, dbias = dbias0;
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(), mean.data(),
                     rstd.data(), N, C);
  const Vec ginp = added(dinp, dinp0), gweight = added(dweight, dweight0), gbias = added(dbias, dbias0);
  CHECK_FD(check_fd(inp, ginp, objective, kTol), "dinp (what the backward added)");
  CHECK_FD(check_fd(weight, gweight, objective, kTol), "dweight (what the backward added)");
  CHECK_FD(check_fd(bias, gbias, objective, kTol), "dbias (what the backward added)");
  // A second call adds the same again.
  objective();
  Vec dinp2 = dinp, dweight2 = dweight;
  layernorm_backward(dinp2.data(), dweight2.data(), dbias.data(), w.data(), inp.data(), weight.data(), mean.data(),
                     rstd.data(), N, C);
  for (std::size_t i = 0; i < dinp.size(); ++i) CHECK(dinp2[i] - dinp[i] == Approx(ginp[i]).margin(1e-12));
  for (int c = 0; c < C; ++c) CHECK(dweight2[c] - dweight[c] == Approx(gweight[c]).margin(1e-12));
}

TEST_CASE("matmul_backward matches finite differences, with and without bias", "[graded][fd_matmul]") {
  constexpr int OC = 9;
  for (bool with_bias : {true, false}) {
    INFO((with_bias ? "with bias" : "without bias (the tied LM head)"));
    Vec inp = random_vec(N * C, 8), weight = random_vec(OC * C, 9), bias = random_vec(OC, 10),
        w = random_vec(N * OC, 11);
    Vec out(N * OC);
    auto objective = [&] {
      matmul_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, N, C, OC);
      return dot(out, w);
    };
    // dinp is written (=), not added to; dweight and dbias accumulate (+=) from non-zero values.
    const Vec dweight0 = random_vec(OC * C, 36), dbias0 = random_vec(OC, 37);
    Vec dinp(N * C, 123.0), dweight = dweight0, dbias = dbias0;
    matmul_backward(dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr, w.data(), inp.data(),
                    weight.data(), N, C, OC);
    CHECK_FD(check_fd(inp, dinp, objective, kTol), "dinp");
    CHECK_FD(check_fd(weight, added(dweight, dweight0), objective, kTol), "dweight (what the backward added)");
    if (with_bias) CHECK_FD(check_fd(bias, added(dbias, dbias0), objective, kTol), "dbias (what the backward added)");
  }
}

TEST_CASE("attention_backward matches finite differences (causal, several heads)", "[graded][fd_attention]") {
  Vec qkv = random_vec(N * 3 * C, 12), w = random_vec(N * C, 13);
  Vec out(N * C), att(static_cast<std::size_t>(B) * NH * T * T);
  auto objective = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(out, w);
  };
  objective();
  // No position may attend to a later one: the saved probabilities are zero above the diagonal.
  for (int bh = 0; bh < B * NH; ++bh)
    for (int t = 0; t < T; ++t)
      for (int u = t + 1; u < T; ++u) CHECK(att[(static_cast<std::size_t>(bh) * T + t) * T + u] == 0.0);
  Vec dqkv(N * 3 * C, 0.0), scratch(T * T);
  attention_backward(dqkv.data(), scratch.data(), w.data(), qkv.data(), att.data(), B, T, C, NH);
  CHECK_FD(check_fd(qkv, dqkv, objective, kTol), "dqkv");
}

// attention_backward works in blocks of 64 queries (keys) on and below the diagonal; T = 5 has
// one block. T = 150 has three, the last one short: against the textbook formulas written as
// plain loops in double (a = softmax of the causal scores, da = dout v^T, ds = a (da - sum a da),
// dq = scale ds k, dk = scale ds^T q, dv = a^T dout). Tolerance: 1e-10 of the largest gradient
// (the same sums in another order).
TEST_CASE("attention_backward over several query blocks equals the formulas", "[graded][fd_attention]") {
  constexpr int Tl = 150, Bl = 1;
  const int hs = C / NH, C3 = 3 * C;
  const double scale = 1.0 / std::sqrt(double(hs));
  const Vec qkv = random_vec(Bl * Tl * C3, 41), dout = random_vec(Bl * Tl * C, 42);
  Vec out(Bl * Tl * C), att(static_cast<std::size_t>(Bl) * NH * Tl * Tl);
  attention_forward(out.data(), att.data(), qkv.data(), Bl, Tl, C, NH);
  Vec dqkv(qkv.size(), 0.0), scratch(Tl * Tl);
  attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), Bl, Tl, C, NH);

  Vec want(qkv.size(), 0.0);
  auto at = [&](int t, int part, int h, int i) { return static_cast<std::size_t>(t) * C3 + part * C + h * hs + i; };
  for (int h = 0; h < NH; ++h) {
    std::vector<Vec> a(Tl, Vec(Tl, 0.0)), ds(Tl, Vec(Tl, 0.0));
    for (int t = 0; t < Tl; ++t) {
      double mx = -1e300, sum = 0, dot_a_da = 0;
      Vec da(Tl, 0.0);
      for (int u = 0; u <= t; ++u) {
        double s = 0;
        for (int i = 0; i < hs; ++i) s += qkv[at(t, 0, h, i)] * qkv[at(u, 1, h, i)];
        a[t][u] = scale * s;
        mx = std::max(mx, a[t][u]);
      }
      for (int u = 0; u <= t; ++u) sum += (a[t][u] = std::exp(a[t][u] - mx));
      for (int u = 0; u <= t; ++u) {
        a[t][u] /= sum;
        for (int i = 0; i < hs; ++i) da[u] += dout[static_cast<std::size_t>(t) * C + h * hs + i] * qkv[at(u, 2, h, i)];
        dot_a_da += a[t][u] * da[u];
      }
      for (int u = 0; u <= t; ++u) ds[t][u] = a[t][u] * (da[u] - dot_a_da);
    }
    for (int t = 0; t < Tl; ++t)
      for (int u = 0; u <= t; ++u)
        for (int i = 0; i < hs; ++i) {
          want[at(t, 0, h, i)] += scale * ds[t][u] * qkv[at(u, 1, h, i)];                        // dq
          want[at(u, 1, h, i)] += scale * ds[t][u] * qkv[at(t, 0, h, i)];                        // dk
          want[at(u, 2, h, i)] += a[t][u] * dout[static_cast<std::size_t>(t) * C + h * hs + i];  // dv
        }
  }
  double largest = 0;
  for (double g : want) largest = std::max(largest, std::fabs(g));
  INFO("T = " << Tl << ": query blocks [0, 64), [64, 128), [128, 150)");
  CHECK_MATCH(compare_close("dqkv vs the formulas", dqkv.data(), want.data(), want.size(), 0.0, 1e-10 * largest));
}

TEST_CASE("gelu_backward matches finite differences", "[graded][fd_gelu]") {
  Vec inp = random_vec(N * C, 14, 3.0), w = random_vec(N * C, 15);
  Vec out(N * C);
  auto objective = [&] {
    gelu_forward(out.data(), inp.data(), out.size());
    return dot(out, w);
  };
  Vec dinp(N * C);
  gelu_backward(dinp.data(), w.data(), inp.data(), dinp.size());
  CHECK_FD(check_fd(inp, dinp, objective, kTol), "dinp");
  // Only the N*C elements it is given: buffers that run on past them keep their guard values.
  Vec dinp_g(N * C + kGuards, kGuard), inp_g = inp, w_g = w;
  inp_g.resize(N * C + kGuards, 1.0);
  w_g.resize(N * C + kGuards, 1.0);
  gelu_backward(dinp_g.data(), w_g.data(), inp_g.data(), N * C);
  CHECK_MATCH(compare_guards("dinp", dinp_g, N * C, kGuard));
}

TEST_CASE("residual_backward matches finite differences", "[graded][fd_residual]") {
  Vec a = random_vec(N * C, 16), b = random_vec(N * C, 17), w = random_vec(N * C, 18);
  Vec out(N * C);
  auto objective = [&] {
    residual_forward(out.data(), a.data(), b.data(), out.size());
    return dot(out, w);
  };
  const Vec da0 = random_vec(N * C, 38), db0 = random_vec(N * C, 39);  // both accumulate (+=)
  Vec da = da0, db = db0;
  residual_backward(da.data(), db.data(), w.data(), da.size());
  CHECK_FD(check_fd(a, added(da, da0), objective, kTol), "da (what the backward added)");
  CHECK_FD(check_fd(b, added(db, db0), objective, kTol), "db (what the backward added)");
  // Only the N*C elements it is given: buffers that run on past them keep their guard values.
  Vec da_g(N * C + kGuards, kGuard), db_g(N * C + kGuards, kGuard), w_g = w;
  w_g.resize(N * C + kGuards, 1.0);
  residual_backward(da_g.data(), db_g.data(), w_g.data(), N * C);
  CHECK_MATCH(compare_guards("da", da_g, N * C, kGuard));
  CHECK_MATCH(compare_guards("db", db_g, N * C, kGuard));
}

TEST_CASE("crossentropy_backward matches finite differences of the mean loss", "[graded][fd_crossentropy]") {
  Vec logits = random_vec(N * V, 19, 2.0);
  const std::vector<int> targets = {0, 6, 3, 3, 1, 2, 5, 4, 0, 6};
  Vec probs(N * V), losses(N);
  auto objective = [&] {
    return crossentropy_forward(probs.data(), losses.data(), logits.data(), targets.data(), N, V);
  };
  objective();
  Vec dlogits(N * V);
  crossentropy_backward(dlogits.data(), probs.data(), targets.data(), 1.0 / N, N, V);
  CHECK_FD(check_fd(logits, dlogits, objective, kTol), "dlogits");
}

TEST_CASE("the float backward agrees with the double backward", "[fd_float]") {
  // The float instantiation is what trains; it must compute the same function as the checked one.
  Vec inp = random_vec(N * C, 20), weight = random_vec(C, 21), bias = random_vec(C, 22), w = random_vec(N * C, 23);
  std::vector<float> inpf(inp.begin(), inp.end()), weightf(weight.begin(), weight.end()),
      biasf(bias.begin(), bias.end()), wf(w.begin(), w.end());
  Vec out(N * C), mean(N), rstd(N), dinp(N * C, 0.0), dweight(C, 0.0), dbias(C, 0.0);
  std::vector<float> outf(N * C), meanf(N), rstdf(N), dinpf(N * C, 0.f), dweightf(C, 0.f), dbiasf(C, 0.f);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
  layernorm_forward(outf.data(), meanf.data(), rstdf.data(), inpf.data(), weightf.data(), biasf.data(), N, C);
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(), mean.data(),
                     rstd.data(), N, C);
  layernorm_backward(dinpf.data(), dweightf.data(), dbiasf.data(), wf.data(), inpf.data(), weightf.data(), meanf.data(),
                     rstdf.data(), N, C);
  for (std::size_t i = 0; i < dinp.size(); ++i) CHECK(dinpf[i] == Approx(dinp[i]).margin(1e-5));
  for (int c = 0; c < C; ++c) CHECK(dweightf[c] == Approx(dweight[c]).margin(1e-5));
}

TEST_CASE("attention is right past one 64-row causal block (T = 70)", "[fd_attention_long]") {
  // The forward and backward work in 64-row query blocks; T = 70 crosses a block edge.
  constexpr int b = 1, t = 70, c = 8, nh = 2, n = b * t;
  Vec qkv = random_vec(n * 3 * c, 24), w = random_vec(n * c, 25);
  Vec out(n * c), att(static_cast<std::size_t>(b) * nh * t * t);
  auto objective = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), b, t, c, nh);
    return dot(out, w);
  };
  objective();
  Vec dqkv(n * 3 * c, 0.0), scratch(t * t);
  attention_backward(dqkv.data(), scratch.data(), w.data(), qkv.data(), att.data(), b, t, c, nh);
  CHECK_FD(check_fd(qkv, dqkv, objective, kTol), "dqkv at T = 70");
}
