// ZeRO behind the trainer's seam: the model, the step's traffic, sharded checkpoints.
#include "dist/zero_strategy.hpp"

#include <algorithm>
#include <sstream>

#include "core/error.hpp"
#include "dist/ddp_strategy.hpp"
#include "dist/zero_mixed_model.hpp"
#include "dist/zero_model.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"

namespace scalelab {

namespace {

constexpr CommOp kStepOps[] = {CommOp::kReduceScatter, CommOp::kAllGather, CommOp::kRingReduceScatter,
                               CommOp::kRingAllGather};

std::string quoted(const std::string& s) { return std::string("'") + s + "'"; }

std::string mib(std::size_t bytes) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(2);
  s << static_cast<double>(bytes) / 1048576.0;
  return s.str();
}

}  // namespace

std::string zero_shard_path(const std::string& path, int rank) {
  return rank == 0 ? path : path + ".zero-rank" + std::to_string(rank);
}

ZeroStrategy::ZeroStrategy(Communicator& comm, const TrainOptions& o, ZeroModelFactory device_model)
    : comm_(comm),
      stage_(o.parallel.zero),
      reshard_(o.parallel.reshard),
      offload_(o.parallel.offload),
      algorithm_(DdpOptions::parse_algorithm(o.parallel.allreduce)),
      precision_(o.precision),
      device_model_(o.device == "cpu" ? ZeroModelFactory{} : std::move(device_model)) {
  const std::string flag = "--zero " + std::to_string(stage_);
  if (device_model_) {
    // On a GPU (kernels/dist/gpu_zero_model.hpp): stages 1-3 in any precision, offload with 1 and 2.
    require(!offload_ || stage_ <= 2, "offload",
            "--offload with " + flag + " and --device " + o.device +
                ": this kit offloads ZeRO-1 and -2's optimizer shard (and ZeRO-2's gradient shard); offloading the "
                "parameters too (ZeRO-Infinity) is not built",
            "use --zero 1 or --zero 2 with --offload, or --zero 3 without --offload");
    require(algorithm_ != DdpOptions::Algorithm::kRing, "allreduce",
            flag + " with --device " + o.device + ": the ring (comm/ring.hpp) adds the pieces on the host",
            "use --allreduce builtin on the GPU");
    return;
  }
  require_cpu(o, flag, flag, "ZeRO's shards");
  if (precision_ != "fp32") {
    // Mixed precision (dist/zero_mixed_model.hpp): stages 1-3 with the backend's collectives.
    require(!offload_, "offload",
            "--offload with --precision " + precision_ + ": the CPU's offloaded optimizer is built in fp32 only",
            "use --precision fp32 with --offload, or leave out --offload (on a GPU, --device cuda offloads any "
            "precision)");
    require(algorithm_ != DdpOptions::Algorithm::kRing, "allreduce",
            flag + " with --precision " + precision_ +
                ": the ring (comm/ring.hpp) adds fp32 gradients, and this model keeps them in half",
            "use --allreduce builtin with --precision " + precision_);
  }
  require(!offload_ || stage_ <= 2, "offload",
          "--offload with --zero 3: this kit offloads ZeRO-1 and -2's optimizer shard; offloading the parameters "
          "too (ZeRO-Infinity) is not built",
          "use --zero 1 or --zero 2 with --offload");
}

std::unique_ptr<TrainModel> ZeroStrategy::make_model(const GPTConfig& config, const std::string& /*precision*/,
                                                     MemoryTracker* tracker, const TrainModelFactory& /*whole*/) {
  tracker_ = tracker;
  std::unique_ptr<ZeroTrainModel> model;
  if (device_model_)
    model = device_model_(config, stage_, precision_, offload_, comm_, tracker);
  else if (precision_ == "fp32")
    model = std::make_unique<ZeroModel>(config, stage_, comm_, algorithm_, tracker, offload_);
  else
    model = std::make_unique<ZeroMixedModel>(config, stage_, parse_half_format(precision_), comm_, tracker);
  model_ = model.get();
  return model;
}

void ZeroStrategy::attach(const StrategyContext& ctx) {
  SCALELAB_CHECK(model_ == &ctx.model, "the ZeRO strategy attaches to the model it built");
  check_batch_split(ctx.options.batch, comm_.size(), ctx.options.micro_batches());
  batch_rows_ = ctx.options.batch;
  check_replicas_agree(comm_, ctx.run_description + ", zero " + std::to_string(stage_));
}

std::string ZeroStrategy::describe() const {
  const ZeroShards& s = model_->shards();
  return "ZeRO stage " + std::to_string(stage_) + ": " + std::to_string(comm_.size()) + " ranks x " +
         std::to_string(batch_rows_ / comm_.size()) + " rows, this rank owns [" + std::to_string(s.begin()) + ", " +
         std::to_string(s.end()) + ") of " + std::to_string(s.num_params()) + " parameters, " +
         (algorithm_ == DdpOptions::Algorithm::kRing
              ? "ring (ours, blocking)"
              : std::string("builtin (") + (device_model_ ? "" : "non-blocking, ") +
                    model_->step_communicator().backend() + ")") +
         (offload_ ? "; optimizer shard, master and gradient shard offloaded to host memory" : "");
}

void ZeroStrategy::begin_step(const GlobalBatch& batch) {
  before_ = model_->step_communicator().stats();
  model_->begin_step(batch.micro_batches);
}

double ZeroStrategy::run_micro_batches(TrainModel& model, const GlobalBatch& batch, double loss_scale) {
  return run_data_parallel_rows(comm_, model, batch, loss_scale);  // the rows as in DDP
}

double ZeroStrategy::mean_loss(double local_loss) { return data_parallel_mean_loss(comm_, local_loss); }

TrainModel::StepOutcome ZeroStrategy::optimizer_step(TrainModel& model, AdamW& optimizer, double lr, double grad_scale,
                                                     double clip) {
  const TrainModel::StepOutcome out = model.optimizer_step(optimizer, lr, grad_scale, clip);
  report_ = {};
  const CommStats& now = model_->step_communicator().stats();
  for (CommOp op : kStepOps) report_.bytes_sent += now[op].bytes_sent - before_[op].bytes_sent;
  const auto& events = model_->timeline().events();
  report_.comm_seconds = comm_busy_us(events) * 1e-6;
  report_.hidden_fraction = hidden_fraction(events);
  return out;
}

const Timeline* ZeroStrategy::timeline() const { return &model_->timeline(); }

std::string ZeroStrategy::report() const {
  const ZeroShards& s = model_->shards();
  const ZeroStateBytes f = model_->state_formula();
  std::string line = "ZeRO-" + std::to_string(stage_) + (offload_ ? "-Offload" : "") + " (" + precision_ + ") rank " +
                     std::to_string(comm_.rank()) + ": shard " + std::to_string(s.size()) + " of " +
                     std::to_string(s.num_params()) + " parameters (no padding)";
  if (tracker_) {
    line += "; params/grads/optimizer MiB now " + mib(tracker_->current(MemCategory::kParams)) + "/" +
            mib(tracker_->current(MemCategory::kGrads)) + "/" + mib(tracker_->current(MemCategory::kOptimizer)) +
            ", peak " + mib(tracker_->peak(MemCategory::kParams)) + "/" + mib(tracker_->peak(MemCategory::kGrads)) +
            "/" + mib(tracker_->peak(MemCategory::kOptimizer));
  }
  line += "; formula " + mib(f.params) + "/" + mib(f.grads) + "/" + mib(f.optimizer);
  if (offload_) {
    const MemoryTracker& host = model_->host_memory();
    const ZeroStateBytes h = zero_offload_host_bytes(s.size());
    line += "; host (offload) params/grads/optimizer MiB now " + mib(host.current(MemCategory::kParams)) + "/" +
            mib(host.current(MemCategory::kGrads)) + "/" + mib(host.current(MemCategory::kOptimizer)) + ", formula " +
            mib(h.params) + "/" + mib(h.grads) + "/" + mib(h.optimizer);
  }
  line += "; sent " + mib(report_.bytes_sent) + " MiB in the last step";
  return line;
}

std::vector<float> ZeroStrategy::held_values(const TrainModel& model, const std::vector<float>& whole) const {
  const ZeroShards& s = static_cast<const ZeroTrainModel&>(model).shards();
  require(whole.size() == s.num_params(), "resume",
          "the values hold " + std::to_string(whole.size()) + " parameters, the model " +
              std::to_string(s.num_params()),
          "use a file saved for this model's config");
  return {whole.begin() + static_cast<std::ptrdiff_t>(s.begin()), whole.begin() + static_cast<std::ptrdiff_t>(s.end())};
}

TrainCheckpoint ZeroStrategy::load_checkpoint(const std::string& path, const TrainModel& model) const {
  const ZeroShards& s = static_cast<const ZeroTrainModel&>(model).shards();
  CheckpointShard first;
  TrainCheckpoint c = scalelab::load_checkpoint(path, &model.config(), &first);
  const int saved = first.ranks;
  if (saved == s.ranks() && first.rank == 0) {
    if (s.rank() == 0) return c;
    CheckpointShard mine;
    TrainCheckpoint own = scalelab::load_checkpoint(zero_shard_path(path, s.rank()), &model.config(), &mine);
    require(mine.rank == s.rank() && mine.ranks == saved && mine.begin == s.begin() && mine.end == s.end(), "resume",
            quoted(zero_shard_path(path, s.rank())) + " is not rank " + std::to_string(s.rank()) +
                "'s shard of the checkpoint " + quoted(path),
            "resume from a complete set of shard files written by one run");
    return own;
  }
  require(reshard_, "resume",
          "the checkpoint '" + path + "' was saved by ZeRO over " + std::to_string(saved) +
              " data-parallel ranks, and this run has " + std::to_string(s.ranks()),
          "add --reshard to re-cut its shards for " + std::to_string(s.ranks()) + " ranks, or run with mpirun -np " +
              std::to_string(saved));
  // Re-cut: assemble the whole params, m and v from every shard, then take this run's range.
  TrainCheckpoint whole = c;
  for (auto* v : {&whole.params, &whole.adam_m, &whole.adam_v}) v->assign(s.num_params(), 0.0f);
  std::size_t covered = 0;
  for (int r = 0; r < saved; ++r) {
    CheckpointShard cut;
    const TrainCheckpoint part = r == 0 ? c
                                        : scalelab::load_checkpoint(zero_shard_path(path, r), &model.config(), &cut);
    if (r == 0) cut = first;
    require(cut.rank == r && cut.ranks == saved, "resume",
            quoted(zero_shard_path(path, r)) + " is not rank " + std::to_string(r) + " of " + std::to_string(saved),
            "resume from a complete set of shard files written by one run");
    require(part.step == c.step, "resume", "the shard files of '" + path + "' come from different steps",
            "resume from a complete set of shard files written by one run");
    std::copy(part.params.begin(), part.params.end(), whole.params.begin() + static_cast<std::ptrdiff_t>(cut.begin));
    std::copy(part.adam_m.begin(), part.adam_m.end(), whole.adam_m.begin() + static_cast<std::ptrdiff_t>(cut.begin));
    std::copy(part.adam_v.begin(), part.adam_v.end(), whole.adam_v.begin() + static_cast<std::ptrdiff_t>(cut.begin));
    covered += cut.end - cut.begin;
  }
  require(covered == s.num_params(), "resume", "the shards of '" + path + "' do not cover the model",
          "resume from a complete set of shard files written by one run");
  return held_checkpoint(model, whole);
}

void ZeroStrategy::save_weights(const TrainModel& model, const std::string& path) const {
  const ZeroTrainModel& z = static_cast<const ZeroTrainModel&>(model);
  if (z.full_params() != nullptr) {  // fp32 stages 1, 2: every rank holds every parameter
    if (comm_.rank() == 0) scalelab::save_weights(path, model.config(), z.full_params());
  } else {
    const ZeroShards& s = z.shards();
    std::vector<float> whole(s.num_params());
    comm_.all_gather(z.master_params(), whole.data(), whole.size(), DataType::kFloat32);
    if (comm_.rank() == 0) scalelab::save_weights(path, model.config(), whole.data());
  }
  comm_.barrier();  // the file is complete when any rank returns
}

void ZeroStrategy::save_checkpoint(const TrainCheckpoint& checkpoint, const std::string& path) const {
  const ZeroShards& s = model_->shards();
  save_checkpoint_shard(zero_shard_path(path, s.rank()), checkpoint,
                        CheckpointShard{s.rank(), s.ranks(), s.begin(), s.end()});
  comm_.barrier();
}

}  // namespace scalelab
