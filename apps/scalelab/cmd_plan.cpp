// `scalelab plan`: which layouts of a model fit a cluster, what each costs in memory per rank,
// bytes moved per rank and step time, ranked (reference/plan/planner.hpp; docs/planner.md).
//
//   scalelab plan --model gpt2-1.5b --cluster h100-sxm --nodes 2 --batch 512
//   scalelab plan --model gpt3-175b --nodes 128 --batch 1536 --top 5 --json out/plan.json
//   scalelab plan --model mini --cluster h100-measured --gpus-per-node 2 --nodes 1 --tp 2
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "core/error.hpp"
#include "plan/planner.hpp"

namespace scalelab::cli {

namespace {

struct PlanFlags {
  std::string model = "gpt2-124m", cluster = "h100-sxm", json;
  int nodes = 1, gpus_per_node = 8, top = 10;
  ShapeOverrides shape;  // --vocab-size, --context, --channels, --layers, --heads (0: the model's)
  double memory_gib = 0, intra_gbps = 0, inter_gbps = 0, peak_tflops = 0, efficiency = 0;
  PlanRequest request;
};

void run_plan(PlanFlags& f) {
  PlanRequest& q = f.request;
  q.model = plan_model_by_name(f.model);
  const ShapeOverrides& o = f.shape;
  if (o.vocab_size || o.max_seq_len || o.channels || o.num_layers || o.num_heads) {
    const GPTConfig& c = q.model.config;
    auto pick = [](int given, int own) { return given > 0 ? given : own; };
    q.model.config = gpt_config_of_shape(pick(o.vocab_size, c.vocab_size), pick(o.max_seq_len, c.max_seq_len),
                                         pick(o.channels, c.channels), pick(o.num_layers, c.num_layers),
                                         pick(o.num_heads, c.num_heads));
    q.model.name = q.model.config.name;
  }
  q.cluster = cluster_preset(f.cluster);
  q.cluster.nodes = f.nodes;
  q.cluster.gpus_per_node = f.gpus_per_node;
  if (f.memory_gib > 0) q.cluster.memory_bytes = f.memory_gib * 1024.0 * 1024.0 * 1024.0;
  if (f.intra_gbps > 0) q.cluster.intra_gbps = f.intra_gbps;
  if (f.inter_gbps > 0) q.cluster.inter_gbps = f.inter_gbps;
  if (f.peak_tflops > 0) q.cluster.peak_tflops = f.peak_tflops;
  if (f.efficiency > 0) q.cluster.efficiency = f.efficiency;
  require(f.top >= 1, "top", "must be >= 1, got " + std::to_string(f.top), "pass e.g. --top 10");
  const std::vector<PlanResult> results = plan_layouts(q);
  std::printf("%s", plan_table(q, results, f.top).c_str());
  if (!f.json.empty()) {
    const std::filesystem::path path(f.json);
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    std::ofstream out(path);
    require(static_cast<bool>(out), "json", "cannot write '" + f.json + "'", "pass a writable path");
    out << plan_json(q, results).dump(1) << "\n";
    std::printf("\nwrote %zu layouts to %s\n", results.size(), f.json.c_str());
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand("plan", "Which layouts of a model fit a cluster: memory, traffic, step time");
  cmd->add_option("--model", f->model, "A named config or a published shape (gpt2-124m ... gpt3-175b)")
      ->capture_default_str();
  cmd->add_option("--vocab-size", f->shape.vocab_size, "Vocabulary V (0: the model's)");
  cmd->add_option("--context", f->shape.max_seq_len, "Sequence length T (0: the model's)");
  cmd->add_option("--channels", f->shape.channels, "Channels C (0: the model's)");
  cmd->add_option("--layers", f->shape.num_layers, "Layers L (0: the model's)");
  cmd->add_option("--heads", f->shape.num_heads, "Heads NH (0: the model's)");
  cmd->add_option("--cluster", f->cluster, "h100-sxm, a100-sxm-80gb, h100-measured or h200-measured")
      ->capture_default_str();
  cmd->add_option("--nodes", f->nodes, "Nodes")->capture_default_str();
  cmd->add_option("--gpus-per-node", f->gpus_per_node, "GPUs (ranks) per node")->capture_default_str();
  cmd->add_option("--gpu-memory-gib", f->memory_gib, "Memory per GPU in GiB (0: the preset's)");
  cmd->add_option("--intra-gbps", f->intra_gbps, "Per-GPU bandwidth inside a node, GB/s (0: the preset's)");
  cmd->add_option("--inter-gbps", f->inter_gbps, "Per-GPU bandwidth between nodes, GB/s (0: the preset's)");
  cmd->add_option("--peak-tflops", f->peak_tflops, "Peak 16-bit TFLOP/s per GPU (0: the preset's)");
  cmd->add_option("--efficiency", f->efficiency, "Fraction of the peak the compute reaches (0: the preset's)");
  cmd->add_option("--batch", f->request.global_batch, "Global batch in sequences")->capture_default_str();
  cmd->add_option("--precision", f->request.precision, "fp32, bf16 or bf16-fp32-grads")->capture_default_str();
  cmd->add_option("--attention", f->request.attention, "flash, chunked or naive (stage 08)")->capture_default_str();
  cmd->add_option("--dp", f->request.dp, "Only this data-parallel size (0: any)");
  cmd->add_option("--tp", f->request.tp, "Only this tensor-parallel size (0: any)");
  cmd->add_option("--pp", f->request.pp, "Only this pipeline size (0: any)");
  cmd->add_option("--zero", f->request.zero, "Only this ZeRO stage (-1: any)");
  cmd->add_option("--micro-batches", f->request.micro_batches, "Only this many micro-batches (0: any)");
  cmd->add_option("--schedule", f->request.schedule, "Only this pipeline schedule (1f1b, zb-h1, interleaved:2)");
  cmd->add_option("--checkpoint", f->request.checkpoint, "Only this checkpoint policy (none, selective, sqrt)");
  cmd->add_option("--top", f->top, "Rows of the table")->capture_default_str();
  cmd->add_option("--json", f->json, "Also write every layout as JSON to this file");
  cmd->callback([f] { run_plan(*f); });
}

}  // namespace scalelab::cli
