// scalelab_gpu_step_bench: the GPU GPT's training step, fp32 (TF32 off and on) and bf16.
//   scalelab_gpu_step_bench --config gpt2 --batch 8 --seq 1024 --steps 10 --peak-tflops 790
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "kernels/bench/step_bench.hpp"
#include "kernels/core/device.hpp"

namespace {

std::vector<std::string> split_variants(const std::string& text) {
  if (text == "all") return {"fp32", "tf32", "bf16", "tf32+flash", "bf16+flash"};
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string v; std::getline(in, v, ',');) out.push_back(v);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Training-step benchmark of the GPU GPT: tokens/s and MFU"};
  scalelab::cuda::StepBenchOptions o;
  std::string precision = "all", json;
  app.add_option("--config", o.config, "Model config: tiny, mini or gpt2")->capture_default_str();
  app.add_option("--batch", o.batch, "Rows per step (B)")->capture_default_str();
  app.add_option("--seq", o.seq_len, "Sequence length T (0: the config's context)")->capture_default_str();
  app.add_option("--steps", o.steps, "Timed steps (the median is reported)")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed steps first")->capture_default_str();
  app.add_option("--precision", precision, "fp32, tf32, bf16 (each optionally +flash), a comma list, or all")
      ->capture_default_str();
  app.add_option("--peak-tflops", o.peak_tflops, "Measured bf16 GEMM TFLOP/s of this device, for MFU (0: none)")
      ->capture_default_str();
  app.add_option("--json", json, "Also write the rows here as JSON");
  CLI11_PARSE(app, argc, argv);
  try {
    o.variants = split_variants(precision);
    if (scalelab::cuda::device_count() == 0) {
      std::fprintf(stderr, "error: no CUDA GPU on this machine; the step benchmark needs one\n");
      return 2;
    }
    const std::string device = scalelab::cuda::device_description();
    std::printf("device %s, config %s, batch %d, %d warm-up + %d timed steps\n", device.c_str(), o.config.c_str(),
                o.batch, o.warmup, o.steps);
    const auto rows = scalelab::cuda::run_step_bench(o);
    std::printf("%-11s %6s %6s %10s %10s %12s %10s %8s %12s %12s\n", "variant", "B", "T", "median ms", "min ms",
                "tokens/s", "TFLOP/s", "MFU", "tracked MiB", "device MiB");
    nlohmann::json out = {{"device", device}, {"config", o.config}, {"peak_tflops", o.peak_tflops}, {"rows", {}}};
    for (const auto& r : rows) {
      std::printf("%-11s %6d %6d %10.2f %10.2f %12.0f %10.1f %7.1f%% %12.1f %12.1f\n", r.variant.c_str(), r.B, r.T,
                  r.median_ms, r.min_ms, r.tokens_per_s, r.tflops, 100 * r.mfu, r.tracked_peak_bytes / 1048576.0,
                  r.device_peak_bytes / 1048576.0);
      out["rows"].push_back({{"variant", r.variant},
                             {"B", r.B},
                             {"T", r.T},
                             {"num_params", r.num_params},
                             {"median_ms", r.median_ms},
                             {"min_ms", r.min_ms},
                             {"max_ms", r.max_ms},
                             {"tokens_per_s", r.tokens_per_s},
                             {"flops_per_token", r.flops_per_token},
                             {"tflops", r.tflops},
                             {"mfu", r.mfu},
                             {"tracked_peak_bytes", r.tracked_peak_bytes},
                             {"device_peak_bytes", r.device_peak_bytes},
                             {"final_loss", r.final_loss}});
    }
    if (!json.empty()) {
      std::ofstream f(json);
      f << out.dump(2) << "\n";
      if (!f) throw scalelab::Error("could not write " + json);
    }
    return 0;
  } catch (const scalelab::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
