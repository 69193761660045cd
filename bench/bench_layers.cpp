// Per-layer benchmarks: forward and backward of every layer function at the shapes the mini
// config uses (B=16, T=256, C=256, NH=4, V=256), single-threaded BLAS, in float. The counters
// say what bounds each layer: GFLOP/s for the matrix products, GB/s (bytes read + written once)
// for the elementwise and row-wise layers. Also fast_exp/fast_tanh (core/fastmath.hpp) against
// std::exp/std::tanh: ns per value, and max_ulp, the worst error over a sample of all floats.
// Run with --benchmark_filter=<regex> to pick some.
#include <benchmark/benchmark.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/blas.hpp"
#include "core/fastmath.hpp"
#include "core/memory.hpp"
#include "core/rng.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/crossentropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/matmul.hpp"
#include "model/layers/residual.hpp"
#include "optim/adamw.hpp"

namespace {

constexpr int kB = 16, kT = 256, kC = 256, kNH = 4, kV = 256;
constexpr int kN = kB * kT;

std::vector<float> random_vector(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  scalelab::Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

std::vector<int> random_tokens(std::size_t n, int V, std::uint64_t seed) {
  scalelab::Rng rng(seed);
  std::vector<int> v(n);
  for (auto& x : v) x = static_cast<int>(rng.below(V));
  return v;
}

void set_flops(benchmark::State& st, double flops_per_iter) {
  st.counters["GFLOP_per_s"] = benchmark::Counter(flops_per_iter * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
void set_bytes(benchmark::State& st, double bytes_per_iter) {
  st.counters["GB_per_s"] = benchmark::Counter(bytes_per_iter * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- encoder ---------------------------------------------------------------------------------
void BM_encoder_forward(benchmark::State& st) {
  auto wte = random_vector(kV * kC, 1), wpe = random_vector(kT * kC, 2);
  auto tok = random_tokens(kN, kV, 3);
  std::vector<float> out(static_cast<std::size_t>(kN) * kC);
  for (auto _ : st) {
    scalelab::encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), kB, kT, kC);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 3.0 * 4 * kN * kC);
}
void BM_encoder_backward(benchmark::State& st) {
  std::vector<float> dwte(kV * kC), dwpe(kT * kC);
  auto dout = random_vector(static_cast<std::size_t>(kN) * kC, 4);
  auto tok = random_tokens(kN, kV, 3);
  for (auto _ : st) {
    scalelab::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), kB, kT, kC);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 5.0 * 4 * kN * kC);
}

// ---- layernorm -------------------------------------------------------------------------------
void BM_layernorm_forward(benchmark::State& st) {
  auto x = random_vector(static_cast<std::size_t>(kN) * kC, 1);
  auto w = random_vector(kC, 2), b = random_vector(kC, 3);
  std::vector<float> out(x.size()), mean(kN), rstd(kN);
  for (auto _ : st) {
    scalelab::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), kN, kC);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 2.0 * 4 * kN * kC);
}
void BM_layernorm_backward(benchmark::State& st) {
  auto x = random_vector(static_cast<std::size_t>(kN) * kC, 1);
  auto w = random_vector(kC, 2), b = random_vector(kC, 3), dout = random_vector(x.size(), 4);
  std::vector<float> out(x.size()), mean(kN), rstd(kN), dx(x.size()), dw(kC), db(kC);
  scalelab::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), kN, kC);
  for (auto _ : st) {
    scalelab::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                                 rstd.data(), kN, kC);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 4.0 * 4 * kN * kC);  // read dout, x, dinp; write dinp
}

// ---- matmul (the linear layers; the argument picks the shape) --------------------------------
// 0: qkv (C -> 3C), 1: attn proj (C -> C), 2: fc (C -> 4C), 3: fc proj (4C -> C), 4: LM head (C -> V)
void linear_shape(int which, int* C, int* OC) {
  const int shapes[5][2] = {{kC, 3 * kC}, {kC, kC}, {kC, 4 * kC}, {4 * kC, kC}, {kC, kV}};
  *C = shapes[which][0];
  *OC = shapes[which][1];
}
void BM_matmul_forward(benchmark::State& st) {
  int C, OC;
  linear_shape(static_cast<int>(st.range(0)), &C, &OC);
  auto x = random_vector(static_cast<std::size_t>(kN) * C, 1), w = random_vector(static_cast<std::size_t>(OC) * C, 2);
  auto b = random_vector(OC, 3);
  std::vector<float> out(static_cast<std::size_t>(kN) * OC);
  const bool bias = st.range(0) != 4;
  for (auto _ : st) {
    scalelab::matmul_forward(out.data(), x.data(), w.data(), bias ? b.data() : nullptr, kN, C, OC);
    benchmark::ClobberMemory();
  }
  set_flops(st, 2.0 * kN * C * OC);
}
void BM_matmul_backward(benchmark::State& st) {
  int C, OC;
  linear_shape(static_cast<int>(st.range(0)), &C, &OC);
  auto x = random_vector(static_cast<std::size_t>(kN) * C, 1), w = random_vector(static_cast<std::size_t>(OC) * C, 2);
  auto dout = random_vector(static_cast<std::size_t>(kN) * OC, 3);
  std::vector<float> dx(x.size()), dw(w.size()), db(OC);
  const bool bias = st.range(0) != 4;
  for (auto _ : st) {
    scalelab::matmul_backward(dx.data(), dw.data(), bias ? db.data() : nullptr, dout.data(), x.data(), w.data(), kN, C,
                              OC);
    benchmark::ClobberMemory();
  }
  set_flops(st, 4.0 * kN * C * OC);
}

// ---- attention -------------------------------------------------------------------------------
// FLOPs counted as the peer does: the full T x T products, 4 B T T C forward and 8 B T T C backward.
void BM_attention_forward(benchmark::State& st) {
  auto qkv = random_vector(static_cast<std::size_t>(kN) * 3 * kC, 1);
  std::vector<float> out(static_cast<std::size_t>(kN) * kC), att(static_cast<std::size_t>(kB) * kNH * kT * kT);
  for (auto _ : st) {
    scalelab::attention_forward(out.data(), att.data(), qkv.data(), kB, kT, kC, kNH);
    benchmark::ClobberMemory();
  }
  set_flops(st, 4.0 * kB * kT * static_cast<double>(kT) * kC);
}
void BM_attention_backward(benchmark::State& st) {
  auto qkv = random_vector(static_cast<std::size_t>(kN) * 3 * kC, 1);
  auto dout = random_vector(static_cast<std::size_t>(kN) * kC, 2);
  std::vector<float> out(static_cast<std::size_t>(kN) * kC), att(static_cast<std::size_t>(kB) * kNH * kT * kT);
  std::vector<float> dqkv(qkv.size()), scratch(static_cast<std::size_t>(kT) * kT);
  scalelab::attention_forward(out.data(), att.data(), qkv.data(), kB, kT, kC, kNH);
  for (auto _ : st) {
    scalelab::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), kB, kT, kC, kNH);
    benchmark::ClobberMemory();
  }
  set_flops(st, 8.0 * kB * kT * static_cast<double>(kT) * kC);
}

// ---- gelu and residual -----------------------------------------------------------------------
void BM_gelu_forward(benchmark::State& st) {
  const std::size_t n = static_cast<std::size_t>(kN) * 4 * kC;
  auto x = random_vector(n, 1);
  std::vector<float> out(n);
  for (auto _ : st) {
    scalelab::gelu_forward(out.data(), x.data(), n);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 2.0 * 4 * n);
}
void BM_gelu_backward(benchmark::State& st) {
  const std::size_t n = static_cast<std::size_t>(kN) * 4 * kC;
  auto x = random_vector(n, 1), dout = random_vector(n, 2);
  std::vector<float> dx(n);
  for (auto _ : st) {
    scalelab::gelu_backward(dx.data(), dout.data(), x.data(), n);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 3.0 * 4 * n);
}
void BM_residual_forward(benchmark::State& st) {
  const std::size_t n = static_cast<std::size_t>(kN) * kC;
  auto a = random_vector(n, 1), b = random_vector(n, 2);
  std::vector<float> out(n);
  for (auto _ : st) {
    scalelab::residual_forward(out.data(), a.data(), b.data(), n);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 3.0 * 4 * n);
}
void BM_residual_backward(benchmark::State& st) {
  const std::size_t n = static_cast<std::size_t>(kN) * kC;
  auto dout = random_vector(n, 1);
  std::vector<float> da(n), db(n);
  for (auto _ : st) {
    scalelab::residual_backward(da.data(), db.data(), dout.data(), n);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 5.0 * 4 * n);
}

// ---- cross-entropy ---------------------------------------------------------------------------
void BM_crossentropy_forward(benchmark::State& st) {
  auto logits = random_vector(static_cast<std::size_t>(kN) * kV, 1);
  auto tgt = random_tokens(kN, kV, 2);
  std::vector<float> probs(logits.size()), losses(kN);
  for (auto _ : st) {
    benchmark::DoNotOptimize(
        scalelab::crossentropy_forward(probs.data(), losses.data(), logits.data(), tgt.data(), kN, kV));
    benchmark::ClobberMemory();
  }
  set_bytes(st, 2.0 * 4 * kN * kV);
}
void BM_crossentropy_backward(benchmark::State& st) {
  auto probs = random_vector(static_cast<std::size_t>(kN) * kV, 1);
  auto tgt = random_tokens(kN, kV, 2);
  std::vector<float> dlogits(probs.size());
  for (auto _ : st) {
    scalelab::crossentropy_backward(dlogits.data(), probs.data(), tgt.data(), 1.0f / kN, kN, kV);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 2.0 * 4 * kN * kV);
}

// ---- AdamW over the mini model's 3.29M parameters --------------------------------------------
void BM_adamw_step(benchmark::State& st) {
  const std::size_t n = 3290624;
  auto p = random_vector(n, 1, 0.02), g = random_vector(n, 2, 1e-3);
  scalelab::AdamW opt(n, scalelab::AdamWConfig{}, nullptr);
  for (auto _ : st) {
    opt.step(p.data(), g.data());
    benchmark::ClobberMemory();
  }
  set_bytes(st, 7.0 * 4 * n);  // read p, g, m, v; write p, m, v
}

// ---- core/fastmath.hpp: throughput, and the worst error in ulp against the double functions ---
// Error of got against the exact value ref, in units of the float spacing at ref (inf counts as
// the float after FLT_MAX, so an overflow that rounds up by one is 1 ulp, not infinitely many).
double ulp_error(float got, double ref) {
  const double max = std::numeric_limits<float>::max();
  const double r = std::fabs(ref) > max ? std::copysign(2.0 * max, ref) : ref;  // inf -> one step past max
  const double g = std::isinf(got) ? std::copysign(2.0 * max, got) : got;
  const float rf = static_cast<float>(std::fabs(r) >= max ? std::copysign(max, r) : r);
  const double spacing = std::fabs(rf) >= max ? max * 0x1p-23 : std::nextafter(std::fabs(rf), INFINITY) - std::fabs(rf);
  return std::fabs(g - r) / spacing;
}
// Every 61st float bit pattern (about 70 million inputs, both signs, all exponents), NaN skipped.
template <typename Fast, typename Exact>
double max_ulp_error(Fast fast, Exact exact) {
  double worst = 0;
  for (std::uint64_t bits = 0; bits < (1ull << 32); bits += 61) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    if (std::isnan(x)) continue;
    const double e = ulp_error(fast(x), exact(static_cast<double>(x)));
    worst = e > worst ? e : worst;
  }
  return worst;
}
template <typename Fast>
void run_elementwise(benchmark::State& st, Fast fast) {
  const std::size_t n = 1 << 20;
  auto x = random_vector(n, 1, 4.0);
  std::vector<float> y(n);
  for (auto _ : st) {
    for (std::size_t i = 0; i < n; ++i) y[i] = fast(x[i]);
    benchmark::ClobberMemory();
  }
  st.counters["ns_per_value"] = benchmark::Counter(1e-9 * n, benchmark::Counter::kIsIterationInvariantRate |
                                                                 benchmark::Counter::kInvert);
}
void BM_fast_exp(benchmark::State& st) {
  run_elementwise(st, [](float v) { return scalelab::fast_exp(v); });
  static const double worst =  // once: Google Benchmark calls this function several times
      max_ulp_error([](float v) { return scalelab::fast_exp(v); }, [](double v) { return std::exp(v); });
  st.counters["max_ulp"] = worst;
}
void BM_std_exp(benchmark::State& st) {
  run_elementwise(st, [](float v) { return std::exp(v); });
}
void BM_fast_tanh(benchmark::State& st) {
  run_elementwise(st, [](float v) { return scalelab::fast_tanh(v); });
  static const double worst = max_ulp_error([](float v) { return scalelab::fast_tanh(v); },
                                            [](double v) { return std::tanh(v); });
  st.counters["max_ulp"] = worst;
}
void BM_std_tanh(benchmark::State& st) {
  run_elementwise(st, [](float v) { return std::tanh(v); });
}

}  // namespace

BENCHMARK(BM_fast_exp)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_std_exp)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_fast_tanh)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_std_tanh)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_encoder_forward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_encoder_backward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_layernorm_forward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_layernorm_backward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_matmul_forward)->DenseRange(0, 4)->ArgName("shape")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_matmul_backward)->DenseRange(0, 4)->ArgName("shape")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention_forward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention_backward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gelu_forward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_gelu_backward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_residual_forward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_residual_backward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_crossentropy_forward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_crossentropy_backward)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_adamw_step)->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  scalelab::set_blas_threads(1);  // the peer comparison is single-threaded
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
