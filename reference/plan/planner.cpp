// The planner's search and its report (plan/planner.hpp).
#include "plan/planner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "schedule/pipeline_schedule.hpp"

namespace scalelab {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int k = 1; k <= n; ++k)
    if (n % k == 0) out.push_back(k);
  return out;
}

bool wanted(int restriction, int value) { return restriction <= 0 || restriction == value; }

std::string gib(double bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f", bytes / kGiB);
  return s;
}

void evaluate(const PlanRequest& q, const PlanLayout& l, std::vector<PlanResult>& out) {
  PlanResult r;
  r.layout = l;
  for (int stage = 0; stage < l.pp; ++stage) {
    r.stage_memory.push_back(plan_memory(q.model.config, l, stage));
    r.stage_traffic.push_back(plan_traffic(q.model.config, l, q.cluster, stage));
    if (stage == 0 || r.stage_memory.back().total() > r.memory.total()) {
      r.memory = r.stage_memory.back();
      r.traffic = r.stage_traffic.back();
    }
  }
  r.time = plan_time(q.model.config, l, q.cluster, r.traffic);
  r.fits = r.memory.total() <= q.cluster.memory_bytes;
  if (!r.fits) {
    const PlanMemory& m = r.memory;
    const std::pair<double, const char*> parts[] = {
        {m.params, "params"}, {m.grads, "grads"}, {m.optimizer, "optimizer"}, {m.activations, "activations"}};
    const auto largest = *std::max_element(std::begin(parts), std::end(parts));
    r.overflow = "needs " + gib(m.total()) + " GiB of " + gib(q.cluster.memory_bytes) + " (largest: " + largest.second +
                 " " + gib(largest.first) + " GiB, pipeline rank " + std::to_string(m.stage) + ")";
  }
  out.push_back(std::move(r));
}

}  // namespace

std::vector<PlanResult> plan_layouts(const PlanRequest& q) {
  q.cluster.validate();
  const GPTConfig& c = q.model.config;
  state_bytes(q.precision);  // names --precision when unknown
  require(q.global_batch >= 1, "batch", "must be >= 1 sequence, got " + std::to_string(q.global_batch),
          "pass e.g. --batch 512");
  const int world = q.cluster.world();
  const AttentionKind attention = parse_attention_kind(q.attention);
  std::vector<CheckpointPolicy> policies;
  // The selective policy recomputes the T x T probabilities, which chunked and flash attention
  // never save: with them it is the same as none.
  const bool tiled = attention != AttentionKind::kNaive;
  for (const std::string name : {"none", "selective", "sqrt"}) {
    const bool redundant = tiled && name == "selective";
    if ((q.checkpoint.empty() && !redundant) || q.checkpoint == name) policies.push_back(CheckpointPolicy::parse(name));
  }
  if (policies.empty()) policies.push_back(CheckpointPolicy::parse(q.checkpoint));
  std::vector<PlanResult> out;
  for (int tp : divisors(std::min(world, q.cluster.gpus_per_node))) {
    if (!wanted(q.tp, tp) || c.num_heads % tp != 0 || c.channels % tp != 0) continue;
    for (int pp : divisors(world / tp)) {
      if (!wanted(q.pp, pp) || pp > c.num_layers) continue;
      const int dp = world / (tp * pp);
      if (!wanted(q.dp, dp) || q.global_batch % dp != 0) continue;
      const int rows = q.global_batch / dp;
      // GPipe (afab) has 1F1B's bubble and more memory, so it is searched only when asked for.
      std::vector<std::string> schedules = {"1f1b"};
      if (pp > 1)
        schedules = q.schedule.empty() ? std::vector<std::string>{"1f1b", "zb-h1", "interleaved:2"}
                                       : std::vector<std::string>{q.schedule};
      for (int b : divisors(rows)) {
        const int m = rows / b;
        if (!wanted(q.micro_batches, m)) continue;
        for (const std::string& schedule : schedules) {
          if (pp >
              1) {  // interleaving needs m a multiple of p (checked first: parsing refuses it) and a block per chunk
            if (schedule.rfind("interleaved", 0) == 0 && m % pp != 0) continue;
            if (parse_pipeline_schedule(schedule, pp, m).model_stages() > c.num_layers) continue;
          }
          for (int zero = 0; zero <= 3; ++zero) {
            if (q.zero >= 0 ? zero != q.zero : (zero > 0 && dp == 1)) continue;
            if (pp > 1 && zero > 1) continue;
            for (bool sp : {false, true}) {
              if (sp && tp == 1) continue;
              for (const CheckpointPolicy& policy : policies) {
                PlanLayout l;
                l.dp = dp;
                l.tp = tp;
                l.pp = pp;
                l.schedule = schedule;
                l.micro_batches = m;
                l.micro_rows = b;
                l.zero = zero;
                l.sequence_parallel = sp;
                l.checkpoint = policy;
                l.precision = q.precision;
                l.attention = attention;
                evaluate(q, l, out);
              }
            }
          }
        }
      }
    }
  }
  require(!out.empty(), "layout",
          "no layout of " + q.model.name + " on " + std::to_string(world) + " ranks meets the restrictions given",
          "relax --dp/--tp/--pp/--zero/--micro-batches, or check that the global batch divides by the "
          "data-parallel size");
  // Fitting layouts by step time; where the model cannot tell two apart (communication hidden
  // behind the same compute), the one that moves fewer bytes, then the one with more memory to
  // spare. Those that do not fit by how much they need.
  std::stable_sort(out.begin(), out.end(), [](const PlanResult& a, const PlanResult& b) {
    if (a.fits != b.fits) return a.fits;
    if (!a.fits) return a.memory.total() < b.memory.total();
    const double scale = std::max(a.time.step_s, b.time.step_s);
    if (std::abs(a.time.step_s - b.time.step_s) > 1e-9 * scale) return a.time.step_s < b.time.step_s;
    if (a.traffic.total() != b.traffic.total()) return a.traffic.total() < b.traffic.total();
    return a.memory.total() < b.memory.total();
  });
  return out;
}

std::string plan_table(const PlanRequest& q, const std::vector<PlanResult>& results, int top) {
  const GPTConfig& c = q.model.config;
  const std::size_t fitting = static_cast<std::size_t>(
      std::count_if(results.begin(), results.end(), [](const PlanResult& r) { return r.fits; }));
  char line[512];
  std::string s;
  std::snprintf(line, sizeof line,
                "model %s: %zu parameters (V=%d T=%d C=%d L=%d NH=%d); %s\n"
                "cluster %s: %d x %d ranks, %s GiB each, links %.0f / %.0f GB/s, %.0f TFLOP/s x %.2f; %s\n"
                "global batch %d sequences, %s; %zu layouts, %zu fit\n\n",
                q.model.name.c_str(), model_params(c), c.vocab_size, c.max_seq_len, c.channels, c.num_layers,
                c.num_heads, q.model.source.c_str(), q.cluster.name.c_str(), q.cluster.nodes, q.cluster.gpus_per_node,
                gib(q.cluster.memory_bytes).c_str(), q.cluster.intra_gbps, q.cluster.inter_gbps, q.cluster.peak_tflops,
                q.cluster.efficiency, q.cluster.source.c_str(), q.global_batch, q.precision.c_str(), results.size(),
                fitting);
  s += line;
  std::snprintf(line, sizeof line, "%-4s %-60s %8s %8s %8s %8s %8s %9s %9s %9s %7s %9s %6s\n", "#", "layout", "params",
                "grads", "optim", "acts", "GiB", "dp GB", "tp GB", "pp GB", "bubble", "step s", "MFU");
  s += line;
  auto row = [&](std::size_t i, const PlanResult& r) {
    const PlanMemory& m = r.memory;
    std::snprintf(line, sizeof line, "%-4zu %-60s %8s %8s %8s %8s %8s %9.3f %9.3f %9.3f %7.3f %9.4f %5.1f%%\n", i + 1,
                  r.layout.describe().c_str(), gib(m.params).c_str(), gib(m.grads).c_str(), gib(m.optimizer).c_str(),
                  gib(m.activations).c_str(), gib(m.total()).c_str(), r.traffic.dp_bytes / 1e9,
                  r.traffic.tp_bytes / 1e9, r.traffic.pp_bytes / 1e9, r.time.bubble, r.time.step_s, 100 * r.time.mfu);
    s += line;
  };
  for (std::size_t i = 0; i < std::min(fitting, static_cast<std::size_t>(top)); ++i) row(i, results[i]);
  if (fitting == 0) s += "(no layout fits)\n";
  if (fitting < results.size()) {
    s += "\nclosest that do not fit:\n";
    for (std::size_t i = fitting; i < std::min(results.size(), fitting + 3); ++i) {
      row(i, results[i]);
      s += "     " + results[i].overflow + "\n";
    }
  }
  return s;
}

nlohmann::json plan_json(const PlanRequest& q, const std::vector<PlanResult>& results) {
  const GPTConfig& c = q.model.config;
  nlohmann::json layouts = nlohmann::json::array();
  for (const PlanResult& r : results) {
    const PlanLayout& l = r.layout;
    nlohmann::json stages = nlohmann::json::array();
    for (std::size_t k = 0; k < r.stage_memory.size(); ++k) {
      const PlanMemory& m = r.stage_memory[k];
      stages.push_back({{"params", m.params},
                        {"grads", m.grads},
                        {"optimizer", m.optimizer},
                        {"activations", m.activations},
                        {"bytes_sent", r.stage_traffic[k].total()}});
    }
    layouts.push_back({{"layout", l.describe()},
                       {"dp", l.dp},
                       {"tp", l.tp},
                       {"pp", l.pp},
                       {"schedule", l.pp > 1 ? l.schedule : "none"},
                       {"micro_batches", l.micro_batches},
                       {"micro_rows", l.micro_rows},
                       {"zero", l.zero},
                       {"sequence_parallel", l.sequence_parallel},
                       {"checkpoint", l.checkpoint.describe()},
                       {"precision", l.precision},
                       {"attention", attention_kind_name(l.attention)},
                       {"fits", r.fits},
                       {"overflow", r.overflow},
                       {"memory_bytes",
                        {{"pipeline_rank", r.memory.stage},
                         {"params", r.memory.params},
                         {"grads", r.memory.grads},
                         {"optimizer", r.memory.optimizer},
                         {"activations", r.memory.activations},
                         {"total", r.memory.total()}}},
                       {"per_pipeline_rank", stages},
                       {"bytes_sent_per_rank",
                        {{"dp", r.traffic.dp_bytes},
                         {"tp", r.traffic.tp_bytes},
                         {"pp", r.traffic.pp_bytes},
                         {"dp_inter_node", r.traffic.dp_inter},
                         {"tp_inter_node", r.traffic.tp_inter},
                         {"pp_inter_node", r.traffic.pp_inter}}},
                       {"time",
                        {{"compute_s", r.time.compute_s},
                         {"bubble", r.time.bubble},
                         {"tp_s", r.time.tp_s},
                         {"pp_s", r.time.pp_s},
                         {"dp_s", r.time.dp_s},
                         {"step_s", r.time.step_s},
                         {"tokens_per_s", r.time.tokens_per_s},
                         {"mfu", r.time.mfu}}}});
  }
  const Cluster& k = q.cluster;
  return {{"model",
           {{"name", q.model.name},
            {"source", q.model.source},
            {"params", model_params(c)},
            {"vocab_size", c.vocab_size},
            {"context", c.max_seq_len},
            {"channels", c.channels},
            {"layers", c.num_layers},
            {"heads", c.num_heads}}},
          {"cluster",
           {{"name", k.name},
            {"nodes", k.nodes},
            {"gpus_per_node", k.gpus_per_node},
            {"memory_bytes", k.memory_bytes},
            {"intra_gbps", k.intra_gbps},
            {"inter_gbps", k.inter_gbps},
            {"peak_tflops", k.peak_tflops},
            {"efficiency", k.efficiency},
            {"source", k.source}}},
          {"global_batch", q.global_batch},
          {"precision", q.precision},
          {"layouts", layouts}};
}

}  // namespace scalelab
