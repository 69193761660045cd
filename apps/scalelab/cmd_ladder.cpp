// `scalelab ladder`: every stage on one config, same seed, same data, side by side. Each row is a
// full training run; the table shows what the technique changed (the loss, within what
// difference from stage 00) and what it cost or saved (memory by category, tokens/s).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <cstdlib>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "core/error.hpp"
#include "train_options.hpp"
#include "train_run.hpp"

namespace scalelab::cli {

namespace {

struct Rung {
  std::string stage;  // "00", "01", ...
  std::string name;
  int grad_accum = 1;
  std::string checkpoint = "none";
  std::string precision = "fp32";
};

std::vector<Rung> all_rungs(int accum) {
  return {
      {"00", "naive", 1, "none", "fp32"},
      {"01", "grad-accum x" + std::to_string(accum), accum, "none", "fp32"},
      {"02", "checkpoint sqrt(L)", 1, "sqrt", "fp32"},
      {"02", "checkpoint selective", 1, "selective", "fp32"},
      {"03", "bf16", 1, "none", "bf16"},
      {"03", "fp16 + loss scaler", 1, "none", "fp16"},
      {"01-03", "accum+sqrt+bf16", accum, "sqrt", "bf16"},
  };
}

double mib(std::size_t bytes) { return bytes / 1048576.0; }

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Stage 04 needs several processes: the ladder starts `mpirun -np ranks scalelab train --ddp
// bucketed` with the same options and reads the loss curve and measurements back from the
// metrics file that rank 0 writes.
nlohmann::json run_data_parallel_rung(const TrainOptions& o, int ranks, const std::string& metrics) {
  std::ostringstream cmd;
  cmd << "mpirun --oversubscribe -np " << ranks << " " << quoted(std::filesystem::read_symlink("/proc/self/exe"))
      << " train --ddp bucketed --config " << o.config << " --steps " << o.steps << " --batch " << o.batch
      << " --seq-len " << o.seq_len << " --lr " << o.adamw.lr << " --beta1 " << o.adamw.beta1 << " --beta2 "
      << o.adamw.beta2 << " --eps " << o.adamw.eps << " --weight-decay " << o.adamw.weight_decay << " --grad-clip "
      << o.adamw.grad_clip << " --seed " << o.seed << " --val-every " << o.val_every << " --val-batches "
      << o.val_batches << " --threads 1 --log-every " << std::max(1, o.steps / 4) << " --metrics " << quoted(metrics);
  if (!o.data.empty()) cmd << " --data " << quoted(o.data);
  std::fflush(stdout);
  const int status = std::system(cmd.str().c_str());
  require(status == 0, "ladder", "stage 04 (`" + cmd.str() + "`) failed with status " + std::to_string(status),
          "run that command by hand to see why, or leave stage 04 out with --stages 00,01,02,03");
  nlohmann::json row = {{"losses", nlohmann::json::array()}};
  std::ifstream in(metrics);
  std::string line;
  std::vector<double> rates, hidden, bytes;
  nlohmann::json last;
  while (std::getline(in, line)) {
    last = nlohmann::json::parse(line);
    row["losses"].push_back(last["loss"]);
    if (row["losses"].size() > 1) {
      rates.push_back(last["tokens_per_s"].get<double>());
      hidden.push_back(last["comm_hidden_fraction"].get<double>());
      bytes.push_back(last["comm_bytes_sent"].get<double>());
    }
  }
  require(!last.is_null(), "ladder", "stage 04 wrote no metrics to '" + metrics + "'", "run it by hand to see why");
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double mean_hidden = 0;
  for (double h : hidden) mean_hidden += h / std::max<std::size_t>(1, hidden.size());
  row["final_loss"] = last["loss"];
  row["val_loss"] = last.value("val_loss", 0.0);
  row["tokens_per_s"] = median(rates);
  row["peak_bytes"] = last["peak_bytes"];
  row["comm_hidden_fraction"] = mean_hidden;
  row["comm_bytes_per_step"] = median(bytes);
  return row;
}

}  // namespace

void add_ladder_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  // Small enough that all rows train in about two minutes on a 2-core laptop.
  flags->options.steps = 30;
  flags->options.batch = 8;
  flags->options.seq_len = 128;
  flags->options.threads = 2;
  auto accum = std::make_shared<int>(4);
  auto json_path = std::make_shared<std::string>("out/ladder.json");
  auto stages = std::make_shared<std::string>("all");
  auto ranks = std::make_shared<int>(2);
  CLI::App* cmd = app.add_subcommand("ladder", "Run every stage side by side and print one comparison table");
  add_train_flags(cmd, *flags);
  cmd->add_option("--accum", *accum, "Micro-batches for the accumulation rows")->capture_default_str();
  cmd->add_option("--json", *json_path, "Write the table and every loss curve here (for the notebooks)")
      ->capture_default_str();
  cmd->add_option("--stages", *stages, "Comma-separated stage numbers to run (e.g. 00,02), or all")
      ->capture_default_str();
  cmd->add_option("--ranks", *ranks, "Processes for stage 04 (data parallel, started with mpirun)")
      ->capture_default_str();
  cmd->callback([=] {
    const TrainOptions base = flags->finish();
    std::vector<Rung> rungs;
    for (const Rung& r : all_rungs(*accum))
      if (*stages == "all" || ("," + *stages + ",").find("," + r.stage + ",") != std::string::npos)
        rungs.push_back(r);
    require(!rungs.empty() || *stages == "04", "stages", "'" + *stages + "' selects no stage",
            "use e.g. 00,01,02,03,04 or all");
    require(base.batch % *accum == 0, "accum",
            std::to_string(*accum) + " does not divide --batch " + std::to_string(base.batch),
            "choose an --accum that divides --batch");

    nlohmann::json out = nlohmann::json::array();
    std::vector<RunSummary> results;
    std::vector<double> baseline;  // stage 00's loss curve
    for (const Rung& r : rungs) {
      TrainOptions o = base;
      o.grad_accum = r.grad_accum;
      o.checkpoint = CheckpointPolicy::parse(r.checkpoint);
      o.precision = r.precision;
      o.metrics.clear();
      RunOutput progress;
      progress.label = "[" + r.stage + " " + r.name + "] ";
      progress.log_every = std::max(1, o.steps / 4);
      std::printf("\n== stage %s: %s\n", r.stage.c_str(), r.name.c_str());
      RunSummary s = run_training(o, progress);
      if (r.stage == "00") baseline = s.losses;
      double diff = std::nan("");
      if (!baseline.empty() && baseline.size() == s.losses.size()) {
        diff = 0;
        for (std::size_t i = 0; i < s.losses.size(); ++i) diff = std::max(diff, std::fabs(s.losses[i] - baseline[i]));
      }
      nlohmann::json row = {{"stage", r.stage},
                            {"name", r.name},
                            {"grad_accum", r.grad_accum},
                            {"checkpoint", r.checkpoint},
                            {"precision", r.precision},
                            {"losses", s.losses},
                            {"final_loss", s.losses.empty() ? 0.0 : s.losses.back()},
                            {"val_loss", s.final_val_loss},
                            {"max_loss_diff_vs_00", std::isnan(diff) ? nlohmann::json(nullptr) : nlohmann::json(diff)},
                            {"tokens_per_s", s.tokens_per_s},
                            {"gflops", s.gflops},
                            {"num_params", s.num_params},
                            {"block_forwards", s.block_forwards}};
      for (int k = 0; k < kMemCategoryCount; ++k)
        row["peak_bytes"][mem_category_name(static_cast<MemCategory>(k))] = s.peak_bytes[k];
      out.push_back(row);
    }

    bool want04 = *stages == "all" || ("," + *stages + ",").find(",04,") != std::string::npos;
#ifndef SCALELAB_HAVE_MPI
    if (want04) std::printf("\n== stage 04 skipped: this build has no MPI (apt-get install libopenmpi-dev openmpi-bin)\n");
    want04 = false;
#endif
    if (want04) {
      // OpenMPI refuses to start as root unless told that this is intended (containers, CI).
      if (geteuid() == 0) {
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
      }
      require(*ranks >= 1 && base.batch % *ranks == 0, "ranks",
              std::to_string(*ranks) + " ranks do not divide --batch " + std::to_string(base.batch),
              "choose --ranks that divides --batch");
      std::printf("\n== stage 04: data parallel, %d ranks (mpirun)\n", *ranks);
      const std::string metrics = json_path->empty() ? std::string("out/ladder-04.jsonl")
                                                     : std::filesystem::path(*json_path).replace_extension("").string() +
                                                           "-04.jsonl";
      if (std::filesystem::path(metrics).has_parent_path())
        std::filesystem::create_directories(std::filesystem::path(metrics).parent_path());
      nlohmann::json row = run_data_parallel_rung(base, *ranks, metrics);
      double diff = 0;
      for (std::size_t i = 0; i < baseline.size() && i < row["losses"].size(); ++i)
        diff = std::max(diff, std::fabs(row["losses"][i].get<double>() - baseline[i]));
      row["stage"] = "04";
      row["name"] = "DDP bucketed x" + std::to_string(*ranks);
      row["grad_accum"] = 1;
      row["checkpoint"] = "none";
      row["precision"] = "fp32";
      row["max_loss_diff_vs_00"] = baseline.empty() ? nlohmann::json(nullptr) : nlohmann::json(diff);
      row["num_params"] = out.empty() ? nlohmann::json(nullptr) : out[0]["num_params"];
      out.push_back(row);
    }

    std::printf("\n%-6s %-22s %8s %8s %10s %8s %8s %8s %8s %9s %8s\n", "stage", "technique", "loss", "val",
                "|dloss|00", "params", "grads", "optim", "acts", "workspace", "tok/s");
    std::printf("%-6s %-22s %8s %8s %10s %8s %8s %8s %8s %9s %8s\n", "", "", "", "", "max", "MiB", "MiB", "MiB", "MiB",
                "MiB", "");
    for (const auto& row : out) {
      const auto& pb = row["peak_bytes"];
      const auto& d = row["max_loss_diff_vs_00"];
      char diff[32];
      if (d.is_null()) std::snprintf(diff, sizeof diff, "%10s", "-");
      else std::snprintf(diff, sizeof diff, "%10.2e", d.get<double>());
      std::printf("%-6s %-22s %8.4f %8.4f %s %8.2f %8.2f %8.2f %8.2f %9.2f %8.0f\n",
                  row["stage"].get<std::string>().c_str(), row["name"].get<std::string>().c_str(),
                  row["final_loss"].get<double>(), row["val_loss"].get<double>(), diff,
                  mib(pb["params"].get<std::size_t>()), mib(pb["grads"].get<std::size_t>()),
                  mib(pb["optimizer"].get<std::size_t>()), mib(pb["activations"].get<std::size_t>()),
                  mib(pb["workspace"].get<std::size_t>()), row["tokens_per_s"].get<double>());
    }
    for (const auto& row : out)
      if (row.contains("comm_hidden_fraction"))
        std::printf("stage 04: each rank sent %.1f MB per step in its all-reduces; %.0f%% of the all-reduce time was "
                    "hidden behind backward (timeline: scalelab train --ddp bucketed --trace out/trace.json)\n",
                    row["comm_bytes_per_step"].get<double>() / 1e6, 100 * row["comm_hidden_fraction"].get<double>());
    if (!json_path->empty()) {
      const std::filesystem::path p(*json_path);
      if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
      std::ofstream f(p);
      require(static_cast<bool>(f), "json", "cannot write '" + *json_path + "'", "pass a writable --json path");
      f << nlohmann::json{{"config", base.config}, {"batch", base.batch}, {"steps", base.steps}, {"rows", out}}.dump(1)
        << "\n";
      std::printf("\nwrote %s\n", json_path->c_str());
    }
  });
}

}  // namespace scalelab::cli
