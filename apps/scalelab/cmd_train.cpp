// `scalelab train`: one training run with live progress, a memory report and optional files.
#include <memory>

#include "comm/runtime.hpp"

#include "commands.hpp"
#include "core/error.hpp"
#include "device_models.hpp"
#include "train_options.hpp"
#include "train_run.hpp"

namespace scalelab::cli {

void add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  auto log_every = std::make_shared<int>(10);
  auto ddp = std::make_shared<std::string>("none");
  auto allreduce = std::make_shared<std::string>("builtin");
  auto bucket_mb = std::make_shared<double>(25);
  auto first_bucket_mb = std::make_shared<double>(1);
  auto backend = std::make_shared<std::string>("auto");
  auto trace = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("train", "Train a GPT on the CPU or a GPU (any combination of the stage features)");
  add_train_flags(cmd, *flags);
  cmd->add_option("--log-every", *log_every, "Steps between progress lines")->capture_default_str();
  cmd->add_option("--ddp", *ddp, "Stage 04: none, naive or bucketed (launch with mpirun -np N)")->capture_default_str();
  cmd->add_option("--allreduce", *allreduce, "Stage 04: builtin (the backend's) or ring (ours)")->capture_default_str();
  cmd->add_option("--bucket-mb", *bucket_mb, "Stage 04: bucket size in MiB")->capture_default_str();
  cmd->add_option("--first-bucket-mb", *first_bucket_mb, "Stage 04: first bucket size in MiB")->capture_default_str();
  cmd->add_option("--backend", *backend,
                  "Stage 04: auto, local, mpi or nccl (--device cuda; otherwise cuda stages through host memory)")
      ->capture_default_str();
  cmd->add_option("--trace", *trace, "Stage 04: write the last step's timeline (Chrome trace) here");
  cmd->callback([=] {
    RunOutput out;
    out.log_every = *log_every;
    const TrainOptions options = flags->finish();
    if (*ddp == "none") {
      run_training(options, out);
      return;
    }
    DataParallelRun dp;
    dp.ddp.mode = DdpOptions::parse_mode(*ddp);
    dp.ddp.algorithm = DdpOptions::parse_algorithm(*allreduce);
    require(*bucket_mb > 0 && *first_bucket_mb > 0, "bucket_mb", "bucket sizes must be positive",
            "pass e.g. --bucket-mb 25 --first-bucket-mb 1");
    dp.ddp.bucket_bytes = static_cast<std::size_t>(*bucket_mb * 1048576);
    dp.ddp.first_bucket_bytes = static_cast<std::size_t>(*first_bucket_mb * 1048576);
    dp.trace = *trace;
    // NCCL carries the gradients only; the ranks start, check and report over MPI.
    dp.nccl = *backend == "nccl";
    if (dp.nccl) require_nccl_backend(options.device);
    CommRuntime runtime(parse_backend(dp.nccl ? "mpi" : *backend), CommOptions{});
    const int status = runtime.run([&](Communicator& world) {
      dp.comm = &world;
      out.progress = world.rank() == 0;
      TrainOptions mine = options;
      if (world.rank() != 0) mine.save_weights = mine.save_checkpoint = mine.metrics = "";  // rank 0 writes
      run_training(mine, out, &dp);
      return 0;
    });
    if (status != 0) throw Error("data-parallel training failed with status " + std::to_string(status));
  });
}

}  // namespace scalelab::cli
