// Cluster presets for the planner.
#include "plan/cluster.hpp"

#include "core/error.hpp"

namespace scalelab {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Preset {
  const char* name;
  double memory_bytes, intra_gbps, inter_gbps, peak_tflops, efficiency;
  const char* source;
};

// Per GPU: memory, one direction of NVLink inside a node and of the node's network adapter per
// GPU, dense bf16 peak, and the fraction of that peak a training step reaches.
//  - H100 SXM5 datasheet: 80 GB HBM3, NVLink 4 at 900 GB/s both directions, 989 TFLOP/s dense
//    bf16; one 400 Gb/s NDR InfiniBand adapter per GPU (a DGX H100). 40% of peak is what
//    well-tuned GPT training reports (Megatron-LM's MFU figures).
//  - A100 SXM4 80GB datasheet: NVLink 3 at 600 GB/s both directions, 312 TFLOP/s dense bf16; one
//    200 Gb/s HDR adapter per GPU (a DGX A100).
//  - What this project measured on one H100 80GB HBM3 with CUDA 13
//    (docs/results/gpu-nvidia-h100-80gb-hbm3.md): device memory 79.1 GiB, the bf16 GEMM ceiling
//    803.2 TFLOP/s, and its own bf16 GPT-2 124M step at 15.5% of that ceiling. The links were not
//    measured (one GPU): the datasheet's.
//  - The same on one H200 with CUDA 13 (docs/results/gpu-nvidia-h200.md): 139.8 GiB, the bf16
//    GEMM ceiling 797.4 TFLOP/s, the bf16 GPT-2 124M step (B 8, T 1024, padded LM head) at 24.6%
//    of it; NVLink 4 and one 400 Gb/s adapter per GPU as in an HGX H200 (not measured).
const Preset kPresets[] = {
    {"h100-sxm", 80e9, 450, 50, 989, 0.40, "H100 SXM datasheet; efficiency 0.40 as tuned Megatron-LM runs report"},
    {"a100-sxm-80gb", 80e9, 300, 25, 312, 0.45,
     "A100 SXM4 80GB datasheet; efficiency 0.45 (Megatron-LM's published A100 runs)"},
    {"h100-measured", 79.1 * kGiB, 450, 50, 803.2, 0.155,
     "measured on one H100 (docs/results); links from the datasheet"},
    {"h200-measured", 139.8 * kGiB, 450, 50, 797.4, 0.246,
     "measured on one H200 (docs/results); links from the datasheet"},
};

}  // namespace

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

Cluster cluster_preset(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) {
      Cluster c;
      c.name = name;
      c.memory_bytes = p.memory_bytes;
      c.intra_gbps = p.intra_gbps;
      c.inter_gbps = p.inter_gbps;
      c.peak_tflops = p.peak_tflops;
      c.efficiency = p.efficiency;
      c.source = p.source;
      return c;
    }
  std::string known;
  for (const std::string& n : cluster_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("cluster: unknown preset '" + name + "'; use one of " + known +
                    ", and override any number with --gpu-memory-gib, --intra-gbps, --inter-gbps, "
                    "--peak-tflops, --efficiency");
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
