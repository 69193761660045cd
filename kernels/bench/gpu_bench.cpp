// scalelab_gpu_bench: the device's two ceilings (copy GB/s, GEMM TFLOP/s), then every kernel of
// kernels/ forward and backward at the GPT-2 124M shape in fp32 and bf16, each as a fraction of
// the ceiling that bounds it. A Markdown table goes to stdout, the same rows as JSON to --json.
//   scalelab_gpu_bench --batch 8 --repeats 20 --json out/gpu/kernels.json
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "kernels/bench/kernel_bench.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/dtype.hpp"

namespace {

using namespace scalelab::cuda;

// The hook for the training-step benchmark: rows measured against the same ceilings, added to
// the report under "training_step". The GPU GPT's step is timed by scalelab_gpu_step_bench
// (kernels/bench/step_bench.hpp) on its own for now; whoever joins the two calls
// run_step_bench() here with peak_tflops = ceilings.bf16_gemm_tflops and returns its rows.
nlohmann::json training_step_rows(const BenchShape& /*shape*/, const BenchOptions& /*options*/,
                                  const Ceilings& /*ceilings*/) {
  return nlohmann::json::array();
}

void print_markdown(const std::string& device, const BenchShape& shape, const Ceilings& c,
                    const std::vector<KernelRow>& rows) {
  std::printf("## Kernels on %s\n\n", device.c_str());
  std::printf("Shape: B=%d T=%d C=%d NH=%d V=%d (%zu parameters).\n\n", shape.B, shape.T, shape.C, shape.NH, shape.V,
              shape.num_params());
  std::printf("| ceiling | measured |\n|---|---:|\n");
  std::printf("| device-to-device copy of %.0f MiB (read + write) | %.0f GB/s |\n", c.copy_bytes / 1048576.0,
              c.copy_gbps);
  std::printf("| bf16 GEMM %d^3 | %.1f TFLOP/s |\n", c.gemm_size, c.bf16_gemm_tflops);
  std::printf("| fp32 GEMM %d^3 (TF32 off) | %.1f TFLOP/s |\n\n", c.gemm_size, c.fp32_gemm_tflops);
  std::printf("| kernel | pass | dtype | median ms | min ms | GB/s | TFLOP/s | of ceiling |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|---:|\n");
  for (const KernelRow& r : rows) {
    char gbps[32] = "", tflops[32] = "";
    if (r.bytes > 0) std::snprintf(gbps, sizeof gbps, "%.0f", r.gbps);
    if (r.flops > 0) std::snprintf(tflops, sizeof tflops, "%.1f", r.tflops);
    std::printf("| %s | %s | %s | %.3f | %.3f | %s | %s | %.0f%% %s |\n", r.kernel.c_str(), r.pass.c_str(),
                r.dtype.c_str(), r.median_ms, r.min_ms, gbps, tflops, 100 * r.fraction,
                r.flops > 0 ? (r.dtype == "fp32" ? "(fp32 GEMM)" : "(bf16 GEMM)") : "(copy)");
  }
}

nlohmann::json to_json(const std::string& device, const BenchShape& shape, const BenchOptions& o, const Ceilings& c,
                       const std::vector<KernelRow>& rows, nlohmann::json training_step) {
  nlohmann::json out = {{"device", device},
                        {"shape",
                         {{"B", shape.B},
                          {"T", shape.T},
                          {"C", shape.C},
                          {"NH", shape.NH},
                          {"V", shape.V},
                          {"num_params", shape.num_params()}}},
                        {"warmup", o.warmup},
                        {"repeats", o.repeats},
                        {"ceilings",
                         {{"copy_gbps", c.copy_gbps},
                          {"copy_bytes", c.copy_bytes},
                          {"gemm_size", c.gemm_size},
                          {"bf16_gemm_tflops", c.bf16_gemm_tflops},
                          {"fp32_gemm_tflops", c.fp32_gemm_tflops}}},
                        {"kernels", nlohmann::json::array()},
                        {"training_step", std::move(training_step)}};
  for (const KernelRow& r : rows)
    out["kernels"].push_back({{"kernel", r.kernel},
                              {"pass", r.pass},
                              {"dtype", r.dtype},
                              {"median_ms", r.median_ms},
                              {"min_ms", r.min_ms},
                              {"bytes", r.bytes},
                              {"flops", r.flops},
                              {"gbps", r.gbps},
                              {"tflops", r.tflops},
                              {"fraction_of_ceiling", r.fraction}});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Kernel benchmark: ceilings, then every kernel at the GPT-2 124M shape in fp32 and bf16"};
  BenchOptions o;
  app.add_option("--batch", o.batch, "B (T = 1024, C = 768, NH = 12, V = 50257)")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed launches before the timed ones")->capture_default_str();
  app.add_option("--repeats", o.repeats, "Timed launches per kernel (the median is reported)")->capture_default_str();
  app.add_option("--json", o.json, "Also write the results here as JSON");
  CLI11_PARSE(app, argc, argv);
  try {
    o.validate();
    if (device_count() == 0) {
      std::fprintf(stderr, "error: no CUDA GPU on this machine; the kernel benchmark needs one\n");
      return 2;
    }
    const std::string device = device_description();
    BenchShape shape;
    shape.B = o.batch;
    std::fprintf(stderr, "%s: ceilings\n", device.c_str());
    const Ceilings ceilings = measure_ceilings(o);
    std::vector<KernelRow> rows;
    auto append = [&rows](std::vector<KernelRow> more) { rows.insert(rows.end(), more.begin(), more.end()); };
    std::fprintf(stderr, "kernels, fp32\n");
    append(bench_layers<float>(shape, o, ceilings));
    append(bench_optimizer<float>(shape, o, ceilings));
    std::fprintf(stderr, "kernels, bf16\n");
    append(bench_layers<bf16>(shape, o, ceilings));
    append(bench_optimizer<bf16>(shape, o, ceilings));
    nlohmann::json step = training_step_rows(shape, o, ceilings);
    print_markdown(device, shape, ceilings, rows);
    if (!o.json.empty()) {
      std::ofstream f(o.json);
      f << to_json(device, shape, o, ceilings, rows, std::move(step)).dump(2) << "\n";
      if (!f) throw scalelab::Error("could not write " + o.json);
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
