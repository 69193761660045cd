// The planner's cluster: nodes of GPUs (or CPU ranks), each with its memory, the bandwidth of the
// links inside a node and between nodes, and the compute it sustains. Presets carry a vendor's
// datasheet numbers, or the numbers this project measured (docs/results/), and say which.
#pragma once

#include <string>
#include <vector>

namespace scalelab {

struct Cluster {
  std::string name;
  int nodes = 1;
  int gpus_per_node = 8;
  double memory_bytes = 0;  // per GPU (or rank)
  double intra_gbps = 0;    // per GPU, one direction, inside a node (GB/s = 1e9 bytes/s)
  double inter_gbps = 0;    // per GPU, one direction, between nodes
  double peak_tflops = 0;   // dense 16-bit (or fp32 for a CPU) matrix-product peak, the MFU denominator
  double efficiency = 0;    // fraction of the peak a training step's compute reaches
  std::string source;

  int world() const { return nodes * gpus_per_node; }
  // Throws ConfigError naming the field when a number is out of range.
  void validate() const;
};

// "h100-sxm", "a100-sxm-80gb", "h100-measured", "h200-measured"; ConfigError naming --cluster
// otherwise.
Cluster cluster_preset(const std::string& name);
std::vector<std::string> cluster_preset_names();

}  // namespace scalelab
