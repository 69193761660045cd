// Pipeline parallelism behind the trainer's seam (stage 05): the rank's stages, its schedule,
// the once-per-step gradient synchronisation, the loss and the norm over all stages.
#include "dist/pipeline_strategy.hpp"

#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.hpp"
#include "core/stats.hpp"
#include "dist/ddp.hpp"
#include "dist/gather_weights.hpp"
#include "io/checkpoint.hpp"
#include "precision/half.hpp"
#include "precision/half_type.hpp"
#include "schedule/rendezvous.hpp"
#include "train/fp32_model.hpp"

namespace scalelab {

namespace {

// What this build's pipeline cannot do: one clear refusal each, raised on every rank.
void refuse_unsupported(const TrainOptions& o, const PipelineDevice& device) {
  const std::string pp = "--pp " + std::to_string(o.parallel.pp);
  if (o.device != "cpu") {
    require(device.chunks && device.messages, "device",
            pp + " with --device " + o.device + ": this program gave the pipeline no GPU model chunks",
            "run scalelab train (built with CUDA), or use --device cpu");
    if (o.parallel.tp > 1) check_tp_on_device(o, static_cast<bool>(device.tp_chunks));  // tp x pp: GPU shards
    require(o.parallel.schedule != "zb-h1", "schedule",
            "--schedule zb-h1 on --device " + o.device + ": the GPU model has no split backward in this build",
            "use --schedule 1f1b (or afab, interleaved:V) on the GPU, or --device cpu for zb-h1");
  }
  require(o.parallel.schedule != "zb-h1" || o.checkpoint.kind == CheckpointPolicy::Kind::kNone, "checkpoint",
          "--schedule zb-h1 defers weight gradients that read the saved activations, and --checkpoint " +
              o.checkpoint.describe() + " recomputes them",
          "drop --checkpoint, or use --schedule 1f1b");
}

// mine += the peer's copy of the same tensor, on both ranks at once (fp32; half added in fp32 and
// rounded once, so both ranks round the same sum).
void add_peer_copy(Communicator& pp, TrainModel::GradBuffer mine, std::size_t n, int peer) {
  if (mine.type == DataType::kFloat32) {
    float* g = static_cast<float*>(mine.data);
    std::vector<float> theirs(n);
    Request r = pp.isend(g, n, DataType::kFloat32, peer, 0);
    pp.recv(theirs.data(), n, DataType::kFloat32, peer, 0);
    pp.wait(r);
    for (std::size_t i = 0; i < n; ++i) g[i] += theirs[i];
    return;
  }
  const HalfFormat format = half_format_of(mine.type).value();  // bf16 or fp16
  auto* g = static_cast<std::uint16_t*>(mine.data);
  std::vector<std::uint16_t> theirs(n);
  Request r = pp.isend(g, n, mine.type, peer, 0);
  pp.recv(theirs.data(), n, mine.type, peer, 0);
  pp.wait(r);
  std::vector<float> a(n), b(n);
  half_to_float(a.data(), g, n, format);
  half_to_float(b.data(), theirs.data(), n, format);
  for (std::size_t i = 0; i < n; ++i) a[i] += b[i];
  float_to_half(g, a.data(), n, format);
}

}  // namespace

PipelineStrategy::PipelineStrategy(Communicator& world, const TrainOptions& o, PipelineDevice device)
    : world_(world),
      shape_(parse_pipeline_schedule(o.parallel.schedule, o.parallel.pp, o.micro_batches())),
      zero_stage_(o.parallel.zero),
      sequence_parallel_(o.parallel.sequence_parallel),
      device_(o.device == "cpu" ? PipelineDevice{} : std::move(device)) {
  refuse_unsupported(o, device_);
  grid_ = std::make_unique<ProcessGrid>(world,
                                        GridShape{o.parallel.pp, o.data_parallel_size(world.size()), o.parallel.tp});
  // Over NCCL (no tags; a send finishes only while its receive runs) some lists would hang as
  // built: there the stuck sends go into the next group (schedule/rendezvous.hpp). Every rank
  // derives all ranks' lists alike, so they agree.
  if (o.parallel.backend == "nccl") {
    try {
      schedule_ = rendezvous_schedules(shape_)[grid_->coord().pp];
    } catch (const Error& e) {
      throw ConfigError("schedule: --schedule " + schedule_name(shape_) + " with --backend nccl: " + e.what() +
                        "; drop --backend nccl (host staging over MPI has tags and sends that never block)");
    }
  } else {
    schedule_ = build_schedule(shape_, grid_->coord().pp);
  }
  // Saving gathers the whole model from replica 0's ranks: its pipeline group, or with tensor
  // parallelism every (pp, tp) rank of it (collective over the world, so made here, by every rank).
  if (o.parallel.tp > 1) model_group_ = world.split(grid_->coord().dp, world.rank());
}

PipelineStrategy::~PipelineStrategy() = default;

std::string PipelineStrategy::describe() const {
  const int d = grid_->shape().dp, m = shape_.micro_batches;
  std::string s = "pipeline: " + std::to_string(shape_.stages) + " stages";
  if (shape_.chunks > 1) s += " x " + std::to_string(shape_.chunks) + " chunks";
  s += ", schedule " + schedule_name(shape_) + ", " + std::to_string(m) + " micro-batches of " +
       std::to_string(batch_rows_ / d / m) + " rows; this rank: stage " + std::to_string(grid_->coord().pp);
  if (stage_) {
    s += " (" + stage_->chunk_at(0).slice().describe(stage_->config());
    for (int c = 1; c < stage_->chunk_count(); ++c) s += ", " + stage_->chunk_at(c).slice().describe(stage_->config());
    s += ")";
  }
  if (grid_->shape().tp > 1)
    s += "; each stage tensor parallel over " + std::to_string(grid_->shape().tp) + " ranks" +
         (sequence_parallel_ ? " with sequence parallelism" : "") + ", this rank tp rank " +
         std::to_string(grid_->coord().tp);
  if (d > 1) s += "; data parallel over " + std::to_string(d) + " replicas";
  if (zero_)
    s += "; ZeRO-1 (distributed optimizer): AdamW state of " + std::to_string(zero_->shard_size()) +
         " of the stage's " + std::to_string(stage_->num_params()) + " parameters";
  return s;
}

std::unique_ptr<TrainModel> PipelineStrategy::make_model(const GPTConfig& config, const std::string& precision,
                                                         MemoryTracker* tracker, const TrainModelFactory& /*whole*/) {
  const StageTensorParallel tp{grid_->shape().tp > 1 ? &grid_->tp() : nullptr, sequence_parallel_, device_.tp_chunks};
  // Under ZeRO-1 in mixed precision the stage keeps only its replica's shard of the master weights.
  const bool mixed = precision != "fp32";
  const MasterShard master = zero_stage_ > 0 && mixed ? MasterShard{grid_->dp().rank(), grid_->dp().size()}
                                                      : MasterShard{};
  auto model = std::make_unique<PipelineStageModel>(config, shape_, grid_->coord().pp, tracker, tp, precision, master,
                                                    device_.chunks);
  stage_ = model.get();
  tracker_ = tracker;
  counted_elsewhere_ = stage_->counted_elsewhere();
  for (const Communicator* comm : stage_->tp_communicators())
    if (comm != &grid_->tp()) device_tp_comms_.push_back(comm);
  if (zero_stage_ == 0) return model;
  std::unique_ptr<DistributedOptimizer> wrapped;
  if (mixed) {
    const DistributedOptimizer::HalfBuffers half{stage_->half_params(), stage_->half_grads(), stage_->held_master(),
                                                 stage_->half_format()};
    wrapped = std::make_unique<DistributedOptimizer>(std::move(model), half, grid_->dp(), tracker);
  } else {
    wrapped = std::make_unique<DistributedOptimizer>(std::move(model), stage_->params(), stage_->fp32_grads(),
                                                     grid_->dp(), tracker);
  }
  zero_ = wrapped.get();
  return wrapped;
}

void PipelineStrategy::attach(const StrategyContext& ctx) {
  SCALELAB_CHECK(zero_ ? zero_ == &ctx.model : stage_ == &ctx.model,
                 "the pipeline strategy attaches to the model it built");
  const int d = grid_->shape().dp;
  check_batch_split(ctx.options.batch, d, shape_.micro_batches);
  batch_rows_ = ctx.options.batch;
  check_replicas_agree(world_, ctx.run_description);
  if (d > 1) {  // the replicas of one stage start from dp rank 0's parameters (as DDP's do)
    stage_->broadcast_params(grid_->dp(), 0);
  }
  // Chunks on a device exchange device messages over the pipeline group's device communicator.
  MessagePlace place{tracker_, nullptr};
  if (MemoryTracker* device = stage_->device_memory()) {
    messages_ = device_.messages(grid_->pp(), device);
    SCALELAB_CHECK(messages_.comm && messages_.memory, "the pipeline's device messages need a communicator and memory");
    place.device = messages_.memory.get();
  }
  executor_ = std::make_unique<PipelineExecutor>(messages(), shape_, *stage_, place, &timeline_);
}

void PipelineStrategy::begin_step(const GlobalBatch& /*batch*/) {
  timeline_.clear();
  pp_before_ = grid_->pp().stats();
  messages_before_ = messages().stats();
  dp_before_ = grid_->dp().stats();
  tp_before_ = grid_->tp().stats();
  device_tp_before_ = device_tp_bytes();
}

std::uint64_t PipelineStrategy::device_tp_bytes() const {
  std::uint64_t bytes = 0;
  for (const Communicator* comm : device_tp_comms_)
    for (CommOp op : {CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter})
      bytes += comm->stats()[op].bytes_sent;
  return bytes;
}

double PipelineStrategy::run_micro_batches(TrainModel& /*model*/, const GlobalBatch& batch, double loss_scale) {
  const int d = grid_->shape().dp, rows = batch.rows / d;
  const std::size_t offset = static_cast<std::size_t>(grid_->coord().dp) * rows * batch.T;
  // As in DDP, each replica's loss is scaled by 1/d, so the sum over replicas is the batch mean's gradient.
  stage_->load_params();  // chunks on a GPU: the parameters of the last update
  const double loss = executor_->run(schedule_, batch.inputs + offset, batch.targets + offset, rows, batch.T,
                                     loss_scale / d);
  stage_->store_grads();  // chunks on a GPU: the step's gradients into the flat buffers
  return loss;
}

void PipelineStrategy::sync_gradients(TrainModel& /*model*/) {
  Communicator& pp = grid_->pp();
  const int p = shape_.stages;
  // 0. Under sequence parallelism, the replicated tensors' gradients summed over the tp group, on
  //    its host communicator (also when the chunks compute on a GPU).
  const CommStats tp_host_before = grid_->tp().stats();
  stage_->finish_gradients();
  // 1. The tied embedding: model stage 0 (pp rank 0) and the last model stage (pp rank p - 1)
  //    each add the other's gradient of wte. a + b and b + a are the same float, so the copies
  //    stay bitwise equal (in mixed precision: added in fp32, rounded once to half).
  const TrainModel::GradBuffer grads = stage_->typed_grads();
  if (p > 1 && (stage_->holds_embeddings() || stage_->holds_head()))
    add_peer_copy(pp, grads + stage_->wte_offset(), stage_->wte_numel(), stage_->holds_embeddings() ? p - 1 : 0);
  // 2. One all-reduce per step over the replicas of this stage, after every backward (under
  //    ZeRO-1 its first half, the reduce-scatter; the all-gather follows the update), in the
  //    gradients' type.
  reduce_over_replicas(zero_, grid_->dp(), grads, stage_->num_params());

  report_ = {};
  report_.bytes_sent += pp.stats()[CommOp::kSend].bytes_sent - pp_before_[CommOp::kSend].bytes_sent;
  if (messages_.comm)  // the messages' own communicator (the tied embedding's sums stay on pp)
    report_.bytes_sent += messages_.comm->stats()[CommOp::kSend].bytes_sent -
                          messages_before_[CommOp::kSend].bytes_sent;
  for (CommOp op : {CommOp::kAllReduce, CommOp::kReduceScatter})
    report_.bytes_sent += grid_->dp().stats()[op].bytes_sent - dp_before_[op].bytes_sent;
  // The tensor-parallel collectives of every chunk's forward and backward: counted on the host
  // group's communicator where the chunks run on it; where they run on device communicators of
  // their own, counted there, plus the host's sum of the replicated gradients (host staging also
  // passes the chunks' collectives through the host group, which must not count them twice).
  if (grid_->shape().tp > 1) {
    const bool own = !device_tp_comms_.empty();
    const CommStats& tp_from = own ? tp_host_before : tp_before_;
    if (own) report_.bytes_sent += device_tp_bytes() - device_tp_before_;
    for (CommOp op : {CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter})
      report_.bytes_sent += grid_->tp().stats()[op].bytes_sent - tp_from[op].bytes_sent;
  }
  report_.comm_seconds = comm_busy_us(timeline_.events()) * 1e-6;
  report_.hidden_fraction = hidden_fraction(timeline_.events());
  measure_bubble();
}

void PipelineStrategy::measure_bubble() {
  // Every rank runs the same number of compute actions (each (micro-batch, chunk) forward and
  // backward once), so one all-gather of fixed-size records brings everyone's.
  const std::vector<MeasuredAction>& mine = executor_->stats().actions;
  constexpr int kFields = 5;  // kind, micro-batch, chunk, start, end
  const int p = shape_.stages;
  const std::size_t n = mine.size();
  std::vector<double> all(kFields * n * p);
  double* own = all.data() + kFields * n * grid_->coord().pp;
  for (std::size_t i = 0; i < n; ++i) {
    const MeasuredAction& a = mine[i];
    const double record[kFields] = {static_cast<double>(a.action.kind), static_cast<double>(a.action.micro_batch),
                                    static_cast<double>(a.action.chunk), a.start_s, a.end_s};
    std::copy(record, record + kFields, own + kFields * i);
  }
  grid_->pp().all_gather(own, all.data(), all.size(), DataType::kFloat64);
  std::vector<std::vector<TimedAction>> ranks(p);
  std::vector<double> durations[4];  // by kind: forward, backward, input backward, weight backward
  for (int r = 0; r < p; ++r)
    for (std::size_t i = 0; i < n; ++i) {
      const double* f = all.data() + kFields * (n * r + i);
      TimedAction t;
      t.action = {static_cast<ActionKind>(static_cast<int>(f[0])), static_cast<int>(f[1]), static_cast<int>(f[2])};
      t.start = f[3];
      t.end = f[4];
      ranks[r].push_back(t);
      durations[static_cast<int>(t.action.kind)].push_back(t.end - t.start);
    }
  bubble_ = {};
  bubble_.measured = bubble_fraction(ranks);
  const bool split = shape_.kind == PipeScheduleKind::kZbH1;
  bubble_.costs.forward = median(durations[static_cast<int>(ActionKind::kForward)]);
  bubble_.costs.backward_input = median(
      durations[static_cast<int>(split ? ActionKind::kBackwardInput : ActionKind::kBackward)]);
  bubble_.costs.backward_weight = split ? median(durations[static_cast<int>(ActionKind::kBackwardWeight)]) : 0.0;
  bubble_.costs.transfer = 0;
  bubble_.scheduled = simulate_pipeline(shape_, build_schedules(shape_), bubble_.costs).bubble_fraction;
  bubble_.formula = bubble_fraction_formula(shape_, bubble_.costs);
  // Each rank's activation memory: the micro-batches it held at once, and the tracker's peak.
  std::vector<double> memory(2 * p);
  double* own_memory = memory.data() + 2 * grid_->coord().pp;
  own_memory[0] = executor_->stats().peak_in_flight;
  // The activations live where the chunks compute: on a GPU, its own tracker counts them.
  const MemoryTracker* activations = stage_->device_memory() ? stage_->device_memory() : tracker_;
  own_memory[1] = activations ? static_cast<double>(activations->peak(MemCategory::kActivations)) : 0.0;
  grid_->pp().all_gather(own_memory, memory.data(), memory.size(), DataType::kFloat64);
  for (int r = 0; r < p; ++r) {
    bubble_.peak_in_flight.push_back(memory[2 * r]);
    bubble_.activation_peak_bytes.push_back(memory[2 * r + 1]);
  }
}

std::string PipelineStrategy::report() const {
  const ActionCosts& c = bubble_.costs;
  char costs[96];
  if (shape_.kind == PipeScheduleKind::kZbH1)
    std::snprintf(costs, sizeof costs, "F %.1f ms, B %.1f ms, W %.1f ms", c.forward * 1e3, c.backward_input * 1e3,
                  c.backward_weight * 1e3);
  else
    std::snprintf(costs, sizeof costs, "F %.1f ms, B %.1f ms", c.forward * 1e3, c.backward_input * 1e3);
  char line[512];
  std::snprintf(line, sizeof line,
                "pipeline bubble of the last step (idle share of the %d ranks' time): measured %.3f on the ranks' "
                "timeline; %.3f for %s run on paper with the measured costs (%s); formula %s = %.3f\n"
                "activations per pipeline rank, peak: ",
                shape_.stages, bubble_.measured, bubble_.scheduled, schedule_name(shape_).c_str(), costs,
                bubble_formula_text(shape_).c_str(), bubble_.formula);
  std::string out = line;
  for (std::size_t r = 0; r < bubble_.peak_in_flight.size(); ++r) {
    std::snprintf(line, sizeof line, "%srank %zu %.2f MiB (%d micro-batches in flight, formula %d)", r ? "; " : "", r,
                  bubble_.activation_peak_bytes[r] / 1048576.0, static_cast<int>(bubble_.peak_in_flight[r]),
                  peak_in_flight_formula(shape_, static_cast<int>(r)));
    out += line;
  }
  // On a GPU the chunks' tensors and activations are the device's; the flat buffers, AdamW and the
  // messages are the host's (the run's memory table).
  if (const MemoryTracker* device = stage_ ? stage_->device_memory() : nullptr)
    out += "\nGPU memory of this rank's chunks (the optimizer and the flat buffers are on the host):\n" +
           device->report();
  return out;
}

double PipelineStrategy::from_last_stage(double value) {
  double v = stage_->holds_head() ? value : 0.0;
  grid_->pp().all_reduce(&v, 1);
  return v;
}

double PipelineStrategy::mean_loss(double local_loss) {
  double loss = from_last_stage(local_loss);
  if (grid_->shape().dp > 1) {
    grid_->dp().all_reduce(&loss, 1);
    loss /= grid_->shape().dp;
  }
  return loss;
}

TrainModel::StepOutcome PipelineStrategy::optimizer_step(TrainModel& /*model*/, AdamW& optimizer, double lr,
                                                         double grad_scale, double clip) {
  // The norm of the whole model's gradient: each rank's sum of squares, summed over the pipeline
  // group and the tensor-parallel group (and first over the shards of the stage under ZeRO-1).
  if (zero_) {
    const TrainModel::StepOutcome out = zero_->step(optimizer, lr, grad_scale, clip, counted_elsewhere_,
                                                    &model_ranks());
    report_.bytes_sent += zero_->gathered_bytes();  // read after the update, so the all-gather counts
    return out;
  }
  const auto total = [&](double s) {
    model_ranks().all_reduce(&s, 1);
    return s;
  };
  return stage_->step_with_norm(optimizer, lr, grad_scale, clip, counted_elsewhere_, total);
}

double PipelineStrategy::evaluate(TrainModel& /*model*/, const int* inputs, const int* targets, int rows, int T) {
  stage_->load_params();
  return from_last_stage(executor_->evaluate(inputs, targets, rows, T));
}

void PipelineStrategy::save_checkpoint(const TrainCheckpoint& checkpoint, const std::string& path) const {
  // Replica 0's pipeline ranks assemble params, m and v of the whole model by name on its first
  // stage, which writes one checkpoint any layout can resume from (held_values). The step, the data
  // position and the schedule are the same on every rank. Under ZeRO-1 each stage's replicas
  // first put their shards together.
  const TrainCheckpoint mine = zero_ ? zero_->gather(checkpoint) : checkpoint;
  if (grid_->coord().dp == 0)
    gather_and_save_checkpoint(model_ranks(), mine, path, [&](const float* values) { return stage_->held(values); });
  world_.barrier();  // the file is complete when any rank returns
}

void PipelineStrategy::save_weights(const TrainModel& /*model*/, const std::string& path) const {
  // The stage's whole parameters (under ZeRO-1 too: the all-gather after each step restores them;
  // in mixed precision the master shards are put together, collectively over the replicas).
  const std::vector<float> values = zero_ ? zero_->gathered_params()
                                          : std::vector<float>(stage_->master_params(),
                                                               stage_->master_params() + stage_->num_params());
  if (grid_->coord().dp == 0)
    gather_and_save_weights(model_ranks(), path, stage_->config(), stage_->held(values.data()));
  world_.barrier();  // the file is complete when any rank returns
}

std::vector<float> PipelineStrategy::held_values(const TrainModel& /*model*/, const std::vector<float>& whole) const {
  std::vector<float> stage = stage_->held_values(whole);
  return zero_ ? zero_->shard_of(stage) : stage;
}

}  // namespace scalelab
