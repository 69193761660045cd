// `scalelab ladder`: every stage on one config, same seed, same data, side by side. Each row is a
// full training run; the table shows what the technique changed (the loss, within what
// difference from stage 00) and what it cost or saved (memory by category, tokens/s).
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/stats.hpp"
#include "io/process.hpp"
#include "train_options.hpp"
#include "train_run.hpp"

namespace scalelab::cli {

namespace {

// A rung is the ladder's base options changed by one technique (or several, composed). A rung
// with more than one rank runs as its own job under mpirun, with exactly these options.
struct Rung {
  std::string stage;  // "00", "01", ...
  std::string name;
  int ranks = 1;
  std::function<void(TrainOptions&)> apply;
};

// Stage 07: the data-parallel rung with the state sharded (every rank a replica of the rows).
std::function<void(TrainOptions&)> zero_rung(int stage) {
  return [stage](TrainOptions& o) {
    o.parallel.zero = stage;
    o.threads = 1;
  };
}

std::vector<Rung> all_rungs(int accum, int ranks) {
  const std::string k = std::to_string(accum);
  return {
      {"00", "naive", 1, [](TrainOptions&) {}},
      {"01", "grad-accum x" + k, 1, [accum](TrainOptions& o) { o.grad_accum = accum; }},
      {"02", "checkpoint sqrt(L)", 1, [](TrainOptions& o) { o.checkpoint = CheckpointPolicy::parse("sqrt"); }},
      {"02", "checkpoint selective", 1, [](TrainOptions& o) { o.checkpoint = CheckpointPolicy::parse("selective"); }},
      {"03", "bf16", 1, [](TrainOptions& o) { o.precision = "bf16"; }},
      {"03", "fp16 + loss scaler", 1, [](TrainOptions& o) { o.precision = "fp16"; }},
      {"01-03", "accum+sqrt+bf16", 1,
       [accum](TrainOptions& o) {
         o.grad_accum = accum;
         o.checkpoint = CheckpointPolicy::parse("sqrt");
         o.precision = "bf16";
       }},
      {"04", "DDP bucketed x" + std::to_string(ranks), ranks,
       [ranks](TrainOptions& o) {
         o.parallel.dp = ranks;
         o.parallel.ddp = "bucketed";
         o.threads = 1;  // one BLAS thread per rank: the ranks share the cores
       }},
      {"05", "pipeline 1F1B x" + std::to_string(ranks) + ", m=" + k, ranks,
       [ranks, accum](TrainOptions& o) {
         o.parallel.pp = ranks;
         o.parallel.micro_batches = accum;
         o.parallel.schedule = "1f1b";
         o.threads = 1;
       }},
      {"06", "tensor parallel x" + std::to_string(ranks) + " + SP", ranks,
       [ranks](TrainOptions& o) {
         o.parallel.tp = ranks;
         o.parallel.sequence_parallel = true;
         o.threads = 1;
       }},
      {"07", "ZeRO-1 x" + std::to_string(ranks), ranks, zero_rung(1)},
      {"07", "ZeRO-2 x" + std::to_string(ranks), ranks, zero_rung(2)},
      {"07", "ZeRO-3 x" + std::to_string(ranks), ranks, zero_rung(3)},
      // Stage 08: the attention saves B NH T per block instead of B NH T^2 (the acts column).
      {"08", "chunked attention", 1, [](TrainOptions& o) { o.attention = "chunked"; }},
      {"08", "flash attention", 1, [](TrainOptions& o) { o.attention = "flash"; }},
      // The techniques composed in one run, as real systems run them (Megatron-LM's 3D layout):
      // a pipeline of `ranks` stages, each split over 2 tensor-parallel ranks with sequence
      // parallelism, two replicas of it with the distributed optimizer (ZeRO-1 over them), sqrt(L)
      // checkpointing in every stage, `accum` micro-batches, in bf16.
      {"01-07", "dp2 tp2 pp" + std::to_string(ranks) + " Z1 SP sqrt bf16", 4 * ranks,
       [ranks, accum](TrainOptions& o) {
         o.precision = "bf16";
         o.parallel.pp = ranks;
         o.parallel.tp = 2;
         o.parallel.dp = 2;
         o.parallel.sequence_parallel = true;
         o.parallel.zero = 1;
         o.parallel.micro_batches = accum;
         o.parallel.schedule = "1f1b";
         o.checkpoint = CheckpointPolicy::parse("sqrt");
         o.threads = 1;
       }},
  };
}

double mib(std::size_t bytes) { return bytes / 1048576.0; }

// A rung in this process: its row from the run's summary.
nlohmann::json run_in_process(const TrainOptions& o, const RunOutput& progress) {
  const RunSummary s = run_training(o, progress);
  nlohmann::json row = {{"losses", s.losses},
                        {"final_loss", s.losses.empty() ? 0.0 : s.losses.back()},
                        {"val_loss", s.final_val_loss},
                        {"tokens_per_s", s.tokens_per_s},
                        {"gflops", s.gflops},
                        {"num_params", s.num_params},
                        {"block_forwards", s.block_forwards}};
  for (int k = 0; k < kMemCategoryCount; ++k)
    row["peak_bytes"][mem_category_name(static_cast<MemCategory>(k))] = s.peak_bytes[k];
  return row;
}

// A rung of several ranks: `mpirun -np R scalelab train --options-file F`, where F holds the
// rung's options exactly (options_to_json), and rank 0 writes the metrics the row is read from.
nlohmann::json run_with_mpirun(TrainOptions o, int ranks, int log_every, const std::string& files) {
  o.metrics = files + ".jsonl";
  const std::string options_path = files + ".options.json";
  write_options_file(options_path, o);
  const std::vector<std::string> argv = {"mpirun",
                                         "--oversubscribe",
                                         "-np",
                                         std::to_string(ranks),
                                         std::filesystem::read_symlink("/proc/self/exe").string(),
                                         "train",
                                         "--options-file",
                                         options_path,
                                         "--log-every",
                                         std::to_string(log_every)};
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
  std::fflush(stdout);
  const ProcessResult result = run_process(argv);
  require(result.ok(), "ladder", "`" + command + "` " + result.describe(),
          "run that command by hand to see why, or leave the rung out with --stages");
  nlohmann::json row = {{"losses", nlohmann::json::array()}};
  std::ifstream in(o.metrics);
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
  require(!last.is_null(), "ladder", "`" + command + "` wrote no metrics to '" + o.metrics + "'",
          "run it by hand to see why");
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
  add_train_flags(cmd, *flags, /*parallel=*/false);
  cmd->add_option("--accum", *accum, "Micro-batches for the accumulation rows")->capture_default_str();
  cmd->add_option("--json", *json_path, "Write the table and every loss curve here (for the notebooks)")
      ->capture_default_str();
  cmd->add_option("--stages", *stages, "Comma-separated stage numbers to run (e.g. 00,02), or all")
      ->capture_default_str();
  cmd->add_option("--ranks", *ranks, "Processes for the multi-rank rungs (stages 04-07; started with mpirun)")
      ->capture_default_str();
  cmd->callback([=] {
    const TrainOptions base = flags->finish();
    bool mpi = true;
#ifndef SCALELAB_HAVE_MPI
    mpi = false;
#endif
    std::vector<Rung> rungs;
    for (const Rung& r : all_rungs(*accum, *ranks))
      if (*stages == "all" || ("," + *stages + ",").find("," + r.stage + ",") != std::string::npos) rungs.push_back(r);
    require(!rungs.empty(), "stages", "'" + *stages + "' selects no stage", "use e.g. 00,01,02,03,04 or all");
    require(base.batch % *accum == 0, "accum",
            std::to_string(*accum) + " does not divide --batch " + std::to_string(base.batch),
            "choose an --accum that divides --batch");
    require(*ranks >= 1, "ranks", "must be at least 1, got " + std::to_string(*ranks), "pass e.g. --ranks 2");
    for (const Rung& r : rungs) {  // every rung's options are checked before the first one trains
      TrainOptions o = base;
      r.apply(o);
      o.validate(r.ranks);
    }
    // OpenMPI refuses to start as root unless told that this is intended (containers, CI).
    if (geteuid() == 0) {
      setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
      setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    }
    const std::string files_base = json_path->empty()
                                       ? std::string("out/ladder")
                                       : std::filesystem::path(*json_path).replace_extension("").string();

    nlohmann::json out = nlohmann::json::array();
    std::vector<double> baseline;  // stage 00's loss curve
    for (const Rung& r : rungs) {
      TrainOptions o = base;
      r.apply(o);
      o.metrics.clear();
      const int log_every = std::max(1, o.steps / 4);
      nlohmann::json row;
      if (r.ranks == 1) {
        std::printf("\n== stage %s: %s\n", r.stage.c_str(), r.name.c_str());
        RunOutput progress;
        progress.label = "[" + r.stage + " " + r.name + "] ";
        progress.log_every = log_every;
        row = run_in_process(o, progress);
      } else if (!mpi) {
        std::printf("\n== stage %s skipped: this build has no MPI (apt-get install libopenmpi-dev openmpi-bin)\n",
                    r.stage.c_str());
        continue;
      } else {
        std::printf("\n== stage %s: %s, %d ranks (mpirun)\n", r.stage.c_str(), r.name.c_str(), r.ranks);
        row = run_with_mpirun(o, r.ranks, log_every, files_base + "-" + r.stage);
      }
      const std::vector<double> losses = row["losses"].get<std::vector<double>>();
      if (r.stage == "00") baseline = losses;
      double diff = std::nan("");
      if (!baseline.empty() && baseline.size() == losses.size()) {
        diff = 0;
        for (std::size_t i = 0; i < losses.size(); ++i) diff = std::max(diff, std::fabs(losses[i] - baseline[i]));
      }
      row["stage"] = r.stage;
      row["name"] = r.name;
      row["ranks"] = r.ranks;
      row["layout"] = "dp" + std::to_string(o.data_parallel_size(r.ranks)) + " tp" + std::to_string(o.parallel.tp) +
                      " pp" + std::to_string(o.parallel.pp) +
                      (o.parallel.zero > 0 ? " z" + std::to_string(o.parallel.zero) : std::string());
      row["grad_accum"] = o.grad_accum;
      row["checkpoint"] = o.checkpoint.describe();
      row["precision"] = o.precision;
      row["max_loss_diff_vs_00"] = std::isnan(diff) ? nlohmann::json(nullptr) : nlohmann::json(diff);
      if (!row.contains("num_params")) row["num_params"] = out.empty() ? nlohmann::json(nullptr) : out[0]["num_params"];
      out.push_back(row);
    }

    // Per rung: its ranks, rank 0's peak memory by category, and what rank 0 sent per step.
    std::printf("\n%-6s %-26s %5s %-14s %8s %8s %10s %8s %8s %8s %8s %9s %8s %8s\n", "stage", "technique", "ranks",
                "layout", "loss", "val", "|dloss|00", "params", "grads", "optim", "acts", "workspace", "sent", "tok/s");
    std::printf("%-6s %-26s %5s %-14s %8s %8s %10s %8s %8s %8s %8s %9s %8s %8s\n", "", "", "", "", "", "", "max", "MiB",
                "MiB", "MiB", "MiB", "MiB", "MB/step", "");
    for (const auto& row : out) {
      const auto& pb = row["peak_bytes"];
      const auto& d = row["max_loss_diff_vs_00"];
      char diff[32];
      if (d.is_null())
        std::snprintf(diff, sizeof diff, "%10s", "-");
      else
        std::snprintf(diff, sizeof diff, "%10.2e", d.get<double>());
      char sent[32];
      if (row.contains("comm_bytes_per_step"))
        std::snprintf(sent, sizeof sent, "%8.2f", row["comm_bytes_per_step"].get<double>() / 1e6);
      else
        std::snprintf(sent, sizeof sent, "%8s", "-");
      std::printf("%-6s %-26s %5d %-14s %8.4f %8.4f %s %8.2f %8.2f %8.2f %8.2f %9.2f %s %8.0f\n",
                  row["stage"].get<std::string>().c_str(), row["name"].get<std::string>().c_str(),
                  row["ranks"].get<int>(), row["layout"].get<std::string>().c_str(), row["final_loss"].get<double>(),
                  row["val_loss"].get<double>(), diff, mib(pb["params"].get<std::size_t>()),
                  mib(pb["grads"].get<std::size_t>()), mib(pb["optimizer"].get<std::size_t>()),
                  mib(pb["activations"].get<std::size_t>()), mib(pb["workspace"].get<std::size_t>()), sent,
                  row["tokens_per_s"].get<double>());
    }
    for (const auto& row : out)
      if (row["stage"] == "05")
        std::printf(
            "stage 05: rank 0 (the first pipeline stage) sent %.1f MB per step: its micro-batches' activations "
            "and its half of the tied-embedding exchange (the schedule: scalelab schedule --pp %d --micro-batches "
            "%d)\n",
            row["comm_bytes_per_step"].get<double>() / 1e6, row["ranks"].get<int>(), *accum);
      else if (row["stage"] == "06")
        std::printf(
            "stage 06: each rank sent %.1f MB per step in its all-gathers, reduce-scatters and all-reduces "
            "(per block and pass: 2 all-gathers, 2 reduce-scatters; the ledger: scalelab train --tp %d "
            "--sequence-parallel)\n",
            row["comm_bytes_per_step"].get<double>() / 1e6, row["ranks"].get<int>());
      else if (row["stage"] == "01-07")
        std::printf(
            "stage 01-07 (composed): rank 0 sent %.1f MB per step: its rows of the activations down the pipeline, "
            "its vocabulary rows of the tied-embedding exchange, its tensor-parallel all-gathers and "
            "reduce-scatters, and its split's reduce-scatter and all-gather over the 2 replicas, all in bf16 but "
            "the cross-entropy's statistics; it holds half of its stage's parameters (tp 2) in bf16, and the fp32 "
            "master weights and AdamW state for half of those (ZeRO-1)\n",
            row["comm_bytes_per_step"].get<double>() / 1e6);
      else if (row["stage"] == "07")
        std::printf(
            "stage 07 (%s): each rank sent %.1f MB per step in its reduce-scatters and all-gathers (stages 1-2: "
            "2 psi (d-1)/d, stage 3: 3 psi (d-1)/d; peak params/grads/optimizer above are per rank)\n",
            row["name"].get<std::string>().c_str(), row["comm_bytes_per_step"].get<double>() / 1e6);
      else if (row.contains("comm_hidden_fraction"))
        std::printf(
            "stage %s: each rank sent %.1f MB per step in its all-reduces; %.0f%% of the all-reduce time was "
            "hidden behind backward (timeline: scalelab train --ddp bucketed --trace out/trace.json)\n",
            row["stage"].get<std::string>().c_str(), row["comm_bytes_per_step"].get<double>() / 1e6,
            100 * row["comm_hidden_fraction"].get<double>());
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
