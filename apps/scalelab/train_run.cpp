// The training loop with reporting.
#include "train_run.hpp"

#include <algorithm>
#include <cstdio>

#include <cstdlib>
#include <filesystem>

#include "comm/runtime.hpp"
#include "core/error.hpp"
#include "core/stats.hpp"
#include "device_models.hpp"
#include "dist/timeline.hpp"
#include "model/params.hpp"
#include "parallel/same_options.hpp"
#include "parallel/strategy_factory.hpp"
#include "train/metrics.hpp"

namespace scalelab::cli {

namespace {

// --backend auto: MPI when an MPI launcher started this process (mpirun sets these), so that a
// plain `scalelab train` needs no MPI at all; nccl starts and reports over MPI too.
Backend runtime_backend(const std::string& backend) {
  if (backend == "nccl") return Backend::kMpi;
  if (backend != "auto") return parse_backend(backend);
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
  return launched && mpi_compiled_in() ? Backend::kMpi : Backend::kLocal;
}
}  // namespace

void run_training_job(const TrainOptions& options, RunOutput out) {
  if (options.parallel.backend == "nccl") require_nccl_backend(options.device);  // before MPI starts
  CommRuntime runtime(runtime_backend(options.parallel.backend), CommOptions{options.parallel.comm_timeout});
  const int status = runtime.run([&](Communicator& world) {
    check_same_options(world, options);  // before any rank builds a grid from its own options
    out.progress = out.progress && world.rank() == 0;
    TrainOptions mine = options;
    if (world.rank() != 0) mine.metrics = "";  // rank 0 writes the metrics; the strategy decides the rest
    run_training(mine, out, &world);
    return 0;
  });
  if (status != 0) throw Error("training failed with status " + std::to_string(status));
}

RunSummary run_training(const TrainOptions& options, const RunOutput& out, Communicator* world) {
  MemoryTracker tracker;
  const bool nccl = options.parallel.backend == "nccl";
  select_rank_gpu(options.device, world);  // before the models allocate on a GPU
  Trainer trainer(options, &tracker, model_factory_for(options.device),
                  make_strategy_factory(world,
                                        device_factories_for(options.device, nccl, options.parallel.comm_timeout)));
  const bool parallel = !options.parallel.single_device() || (world && world->size() > 1);
  MetricsWriter metrics = options.metrics.empty() ? MetricsWriter() : MetricsWriter(options.metrics);
  RunSummary summary;
  summary.num_params = trainer.model().num_params();
  const GPTConfig& c = trainer.model().config();
  if (out.progress)
    std::printf(
        "%sconfig %s (V=%d T=%d C=%d L=%d NH=%d), %zu parameters, batch %d x %d tokens, %s, grad-accum %d, "
        "checkpoint %s, attention %s, device %s\n",
        out.label.c_str(), c.name.c_str(), c.vocab_size, trainer.seq_len(), c.channels, c.num_layers, c.num_heads,
        summary.num_params, options.batch, trainer.seq_len(), options.precision.c_str(), options.grad_accum,
        options.checkpoint.describe().c_str(), options.attention.c_str(), device_label(options.device).c_str());
  if (out.progress && !(trainer.lr_schedule() == LrSchedule{}))
    std::printf("%slr schedule: %s, peak %g\n", out.label.c_str(),
                trainer.lr_schedule().describe(trainer.schedule_steps()).c_str(), options.adamw.lr);
  if (parallel && out.progress) std::printf("%s%s\n", out.label.c_str(), trainer.strategy().describe().c_str());
  std::vector<double> rates, hidden, comm_bytes;
  const long first = trainer.steps_done();
  for (int i = 0; i < options.steps; ++i) {
    const StepStats s = trainer.step();
    summary.losses.push_back(s.loss);
    if (i > 0 || options.steps == 1) {  // the first step allocates
      rates.push_back(s.tokens_per_s);
      hidden.push_back(s.comm_hidden_fraction);
      comm_bytes.push_back(static_cast<double>(s.comm_bytes_sent));
    }
    nlohmann::json rec = {{"step", s.step},
                          {"loss", s.loss},
                          {"grad_norm", s.grad_norm},
                          {"ms", s.seconds * 1e3},
                          {"tokens_per_s", s.tokens_per_s},
                          {"skipped", s.skipped},
                          {"loss_scale", s.loss_scale},
                          {"lr", s.lr}};
    if (parallel) {
      rec["comm_hidden_fraction"] = s.comm_hidden_fraction;
      rec["comm_seconds"] = s.comm_seconds;
      rec["comm_bytes_sent"] = s.comm_bytes_sent;
    }
    const bool last = i + 1 == options.steps;
    double val = -1;
    if ((options.val_every > 0 && s.step % options.val_every == 0) || last) {
      val = trainer.validation_loss();
      rec["val_loss"] = val;
    }
    // The peak so far, and what is held after the step: the steady state the formulas describe
    // (working buffers that come and go, e.g. ZeRO-3's gathered blocks, are in the peak only).
    nlohmann::json mem, held;
    for (int k = 0; k < kMemCategoryCount; ++k) {
      mem[mem_category_name(static_cast<MemCategory>(k))] = tracker.peak(static_cast<MemCategory>(k));
      held[mem_category_name(static_cast<MemCategory>(k))] = tracker.current(static_cast<MemCategory>(k));
    }
    rec["peak_bytes"] = mem;
    rec["bytes_after_step"] = held;
    metrics.write(rec);
    if (out.progress && (i == 0 || last || (s.step - first) % out.log_every == 0)) {
      std::printf("%sstep %5ld/%ld | loss %.4f", out.label.c_str(), s.step, first + options.steps, s.loss);
      if (val >= 0) std::printf(" | val %.4f", val);
      std::printf(" | %7.0f tok/s | %6.1f GFLOP/s | %6.0f ms | peak %.1f MiB", s.tokens_per_s,
                  s.tokens_per_s * trainer.flops_per_token() / 1e9, s.seconds * 1e3, tracker.peak_total() / 1048576.0);
      if (parallel)
        std::printf(" | sent %.1f MB, comm %.0f ms, %.0f%% hidden", s.comm_bytes_sent / 1e6, s.comm_seconds * 1e3,
                    100 * s.comm_hidden_fraction);
      std::printf("%s\n", s.skipped ? " | skipped (inf/NaN), scale lowered" : "");
      std::fflush(stdout);
    }
    if (last) summary.final_val_loss = val;
  }
  summary.tokens_per_s = median(rates);
  if (!hidden.empty()) {
    for (double h : hidden) summary.comm_hidden_fraction += h / hidden.size();
    for (double b : comm_bytes) summary.comm_bytes_per_step += b / comm_bytes.size();
  }
  if (out.progress && !trainer.strategy().report().empty())
    std::printf("%s%s\n", out.label.c_str(), trainer.strategy().report().c_str());
  const Timeline* timeline = trainer.strategy().timeline();
  if (!options.parallel.trace.empty() && !timeline && out.progress)
    std::printf("%sno timeline to write to %s: the %s strategy records none\n", out.label.c_str(),
                options.parallel.trace.c_str(), trainer.strategy().describe().c_str());
  if (!options.parallel.trace.empty() && timeline) {
    const std::filesystem::path dir = std::filesystem::path(options.parallel.trace).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir);
    if (world && world->size() > 1)
      write_merged_chrome_trace(*world, *timeline, options.parallel.trace);
    else
      timeline->write_chrome_trace(options.parallel.trace, 0);
    if (out.progress)
      std::printf("%swrote the last step's timeline: %s (every rank a track; open it in ui.perfetto.dev)\n",
                  out.label.c_str(), options.parallel.trace.c_str());
  }
  summary.gflops = summary.tokens_per_s * trainer.flops_per_token() / 1e9;
  for (int k = 0; k < kMemCategoryCount; ++k) summary.peak_bytes[k] = tracker.peak(static_cast<MemCategory>(k));
  summary.block_forwards = trainer.model().block_forward_count();
  const float* p = trainer.model().master_params();
  summary.final_params.assign(p, p + summary.num_params);
  if (out.progress) {
    // Per parameter of the whole model: a rank that holds a part (ZeRO's shard, a tensor-parallel
    // split, a pipeline stage) shows what its part costs against the model it trains.
    const double n = static_cast<double>(ParamLayout(trainer.model().config()).num_params());
    std::printf("\n%smemory by category after %d steps:\n%s", out.label.c_str(), options.steps,
                tracker.report().c_str());
    std::printf("bytes per model parameter: params %.2f + grads %.2f + optimizer %.2f = %.2f\n",
                tracker.peak(MemCategory::kParams) / n, tracker.peak(MemCategory::kGrads) / n,
                tracker.peak(MemCategory::kOptimizer) / n,
                (tracker.peak(MemCategory::kParams) + tracker.peak(MemCategory::kGrads) +
                 tracker.peak(MemCategory::kOptimizer)) /
                    n);
  }
  if (!options.save_weights.empty()) trainer.save_weights(options.save_weights);
  if (!options.save_checkpoint.empty()) trainer.save_checkpoint(options.save_checkpoint);
  return summary;
}

}  // namespace scalelab::cli
