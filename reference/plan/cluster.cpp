// Cluster presets for the planner.
#include "plan/cluster.hpp"

#include "core/error.hpp"

namespace scalelab {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}

std::vector<std::string> cluster_preset_names() { return {"h100-sxm", "a100-sxm-80gb", "h100-measured"}; }

Cluster cluster_preset(const std::string& name) {
  Cluster c;
  c.name = name;
  if (name == "h100-sxm") {
    // NVIDIA H100 SXM5 datasheet: 80 GB HBM3, NVLink 4 at 900 GB/s both directions, 989 TFLOP/s
    // dense bf16; one 400 Gb/s NDR InfiniBand adapter per GPU (a DGX H100). 40% of peak is what
    // well-tuned GPT training reports (Megatron-LM's MFU figures).
    c.memory_bytes = 80e9;
    c.intra_gbps = 450;
    c.inter_gbps = 50;
    c.peak_tflops = 989;
    c.efficiency = 0.40;
    c.source = "H100 SXM datasheet; efficiency 0.40 as tuned Megatron-LM runs report";
  } else if (name == "a100-sxm-80gb") {
    // A100 SXM4 80GB datasheet: NVLink 3 at 600 GB/s both directions, 312 TFLOP/s dense bf16;
    // one 200 Gb/s HDR adapter per GPU (a DGX A100).
    c.memory_bytes = 80e9;
    c.intra_gbps = 300;
    c.inter_gbps = 25;
    c.peak_tflops = 312;
    c.efficiency = 0.45;
    c.source = "A100 SXM4 80GB datasheet; efficiency 0.45 (Megatron-LM's published A100 runs)";
  } else if (name == "h100-measured") {
    // What this project measured on one H100 80GB HBM3 with CUDA 13
    // (docs/results/gpu-nvidia-h100-80gb-hbm3.md): device memory 79.1 GiB, the bf16 GEMM ceiling
    // 803.2 TFLOP/s, and its own bf16 GPT-2 124M step at 15.5% of that ceiling. The links were
    // not measured (one GPU): the datasheet's.
    c.memory_bytes = 79.1 * kGiB;
    c.intra_gbps = 450;
    c.inter_gbps = 50;
    c.peak_tflops = 803.2;
    c.efficiency = 0.155;
    c.source = "measured on one H100 (docs/results); links from the datasheet";
  } else {
    std::string known;
    for (const std::string& n : cluster_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw ConfigError("cluster: unknown preset '" + name + "'; use one of " + known +
                      ", and override any number with --gpu-memory-gib, --intra-gbps, --inter-gbps, "
                      "--peak-tflops, --efficiency");
  }
  return c;
}

void Cluster::validate() const {
  require(nodes >= 1, "nodes", "must be >= 1, got " + std::to_string(nodes), "pass e.g. --nodes 4");
  require(gpus_per_node >= 1, "gpus-per-node", "must be >= 1, got " + std::to_string(gpus_per_node),
          "pass e.g. --gpus-per-node 8");
  require(memory_bytes > 0, "gpu-memory-gib", "must be positive", "pass e.g. --gpu-memory-gib 80");
  require(intra_gbps > 0 && inter_gbps > 0, "intra-gbps", "link bandwidths must be positive",
          "pass e.g. --intra-gbps 450 --inter-gbps 50");
  require(peak_tflops > 0, "peak-tflops", "must be positive", "pass e.g. --peak-tflops 989");
  require(efficiency > 0 && efficiency <= 1, "efficiency", "must be in (0, 1]", "pass e.g. --efficiency 0.4");
}

}  // namespace scalelab
