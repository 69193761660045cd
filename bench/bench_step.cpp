// The training-step benchmark: forward + backward + AdamW of the GPT on the CPU, the same work
// per step as bench/peers/torch_gpt_bench.py (PyTorch), reported as tokens/s and GFLOP/s with
// the same FLOP formula, so tools/bench_cpu.sh can print the two side by side.
//
//   bench_step [--V 256 --T 256 --C 256 --L 4 --H 4 --B 16 --steps 10 --threads 1] [--benchmark_...]
//
// Each repetition is one timed step (Iterations(1)); the aggregate rows give the median over
// --steps steps, after two untimed warm-up steps, as the peer does. The sgemm_* counters time
// the step's matrix products on their own (bench/sgemm_clock.hpp).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/blas.hpp"
#include "core/memory.hpp"
#include "core/rng.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "sgemm_clock.hpp"

namespace {

struct StepOptions {
  int V = 256, T = 256, C = 256, L = 4, H = 4, B = 16;
  int steps = 10, threads = 1;
};

// Reads our --NAME VALUE flags and leaves everything else (the --benchmark_* flags) in argv.
StepOptions parse_step_options(int* argc, char** argv) {
  StepOptions o;
  struct Flag {
    const char* name;
    int* value;
  };
  const Flag flags[] = {{"--V", &o.V}, {"--T", &o.T}, {"--C", &o.C},         {"--L", &o.L},
                        {"--H", &o.H}, {"--B", &o.B}, {"--steps", &o.steps}, {"--threads", &o.threads}};
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    bool ours = false;
    for (const Flag& f : flags)
      if (std::strcmp(argv[i], f.name) == 0) {
        if (i + 1 >= *argc) {
          std::fprintf(stderr, "bench_step: %s needs a value, e.g. %s 16\n", f.name, f.name);
          std::exit(2);
        }
        *f.value = std::atoi(argv[++i]);
        ours = true;
      }
    if (!ours) argv[kept++] = argv[i];
  }
  *argc = kept;
  return o;
}

// One model, optimizer and batch, built once and shared by every repetition.
struct StepState {
  scalelab::MemoryTracker tracker;
  std::unique_ptr<scalelab::GPT> model;
  std::unique_ptr<scalelab::AdamW> opt;
  std::vector<int> tokens, targets;
  bool warm = false;
};

void train_step(StepState& s, int B, int T) {
  s.model->forward(s.tokens.data(), s.targets.data(), B, T);
  s.model->zero_grad();
  s.model->backward();
  s.opt->step(s.model->params(), s.model->grads());
}

}  // namespace

int main(int argc, char** argv) {
  const StepOptions o = parse_step_options(&argc, argv);
  scalelab::set_blas_threads(o.threads);

  const scalelab::GPTConfig config = scalelab::gpt_config_of_shape(o.V, o.T, o.C, o.L, o.H, "bench");

  StepState state;
  state.model = std::make_unique<scalelab::GPT>(config, &state.tracker);
  state.model->init_weights(0);
  state.opt = std::make_unique<scalelab::AdamW>(state.model->num_params(), scalelab::AdamWConfig{}, &state.tracker);
  scalelab::Rng rng(1);
  const std::size_t BT = static_cast<std::size_t>(o.B) * o.T;
  for (std::size_t i = 0; i < BT; ++i) {
    state.tokens.push_back(static_cast<int>(rng.below(o.V)));
    state.targets.push_back(static_cast<int>(rng.below(o.V)));
  }

  // FLOPs per step, as the peer counts them: 6 P per token (forward + backward of every weight)
  // plus the attention scores and mixing, 12 L T C per token.
  const double P = static_cast<double>(state.model->num_params());
  const double flops = 6.0 * P * o.B * o.T + 12.0 * o.L * o.B * static_cast<double>(o.T) * o.T * o.C;

  const std::string name = "train_step/V" + std::to_string(o.V) + "_T" + std::to_string(o.T) + "_C" +
                           std::to_string(o.C) + "_L" + std::to_string(o.L) + "_H" + std::to_string(o.H) + "_B" +
                           std::to_string(o.B) + "_threads" + std::to_string(o.threads);
  benchmark::RegisterBenchmark(
      name.c_str(),
      [&](benchmark::State& st) {
        if (!state.warm) {  // two untimed warm-up steps, like the peer
          for (int i = 0; i < 2; ++i) train_step(state, o.B, o.T);
          state.warm = true;
        }
        scalelab::bench::reset_sgemm_totals();
        const auto t0 = std::chrono::steady_clock::now();
        for (auto _ : st) train_step(state, o.B, o.T);
        const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        // The step's matrix products alone: their share of the step, their speed, and the tokens/s
        // of a step that spent no time anywhere else (the bound that a faster rest cannot pass).
        const scalelab::bench::SgemmTotals g = scalelab::bench::sgemm_totals();
        st.counters["sgemm_calls"] = static_cast<double>(g.calls);
        st.counters["sgemm_ms"] = 1e3 * g.seconds;
        st.counters["sgemm_share"] = step_s > 0 ? g.seconds / step_s : 0;
        st.counters["sgemm_GFLOP_per_s"] = g.seconds > 0 ? g.flops * 1e-9 / g.seconds : 0;
        st.counters["sgemm_bound_tokens_per_s"] = g.seconds > 0 ? static_cast<double>(BT) / g.seconds : 0;
        st.counters["params"] = P;
        st.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(BT),
                                                         benchmark::Counter::kIsIterationInvariantRate);
        st.counters["GFLOP_per_s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
        st.SetLabel(std::string("sgemm: ") + scalelab::blas_name());
      })
      ->Iterations(1)
      ->Repetitions(o.steps)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
