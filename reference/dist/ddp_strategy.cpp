// Data parallelism behind the trainer's seam: which rows a rank runs, when the buckets arm and
// finish, the mean loss, and what the step moved.
#include "dist/ddp_strategy.hpp"

#include <string>
#include <vector>

#include "core/error.hpp"
#include "train/accumulate.hpp"

namespace scalelab {

// The options were validated (TrainOptions::validate): bucket sizes are positive.
DdpOptions ddp_options_from(const ParallelOptions& p) {
  DdpOptions o;
  o.mode = DdpOptions::parse_mode(p.ddp == "auto" ? "bucketed" : p.ddp);
  o.algorithm = DdpOptions::parse_algorithm(p.allreduce);
  o.bucket_bytes = static_cast<std::size_t>(p.bucket_mb * 1048576);
  o.first_bucket_bytes = static_cast<std::size_t>(p.first_bucket_mb * 1048576);
  return o;
}

DdpStrategy::DdpStrategy(Communicator& comm, const DdpOptions& options, Communicator* grad_comm,
                         GradCommFactory make_grad_comm)
    : comm_(comm), options_(options), grad_comm_(grad_comm), make_grad_comm_(std::move(make_grad_comm)) {}

DdpStrategy::~DdpStrategy() = default;

void DdpStrategy::attach(const StrategyContext& ctx) {
  const int d = comm_.size(), m = ctx.options.micro_batches();
  check_batch_split(ctx.options.batch, d, m);
  batch_rows_ = ctx.options.batch;
  check_replicas_agree(comm_, ctx.run_description);
  // Like PyTorch's DDP: rank 0's parameters are the starting point of every replica.
  TrainModel& model = ctx.model;
  std::vector<float> p(model.master_params(), model.master_params() + model.num_params());
  comm_.broadcast(p.data(), p.size(), 0);
  model.set_master_params(p.data());
  if (!grad_comm_ && make_grad_comm_) {
    owned_grad_comm_ = make_grad_comm_(comm_, model);
    grad_comm_ = owned_grad_comm_.get();
  }
  if (!grad_comm_) grad_comm_ = &comm_;
  SCALELAB_CHECK(grad_comm_->size() == d && grad_comm_->rank() == comm_.rank(),
                 "the gradient communicator must span the same ranks as the data-parallel group");
  ddp_ = std::make_unique<DataParallel>(*grad_comm_, model, options_);
}

std::string DdpStrategy::describe() const {
  const int d = comm_.size();
  const std::string how = options_.mode == DdpOptions::Mode::kNaive
                              ? "naive (" + std::to_string(ddp_->bucket_count()) +
                                    " all-reduces, one per tensor, after backward)"
                              : "bucketed (" + std::to_string(ddp_->bucket_count()) +
                                    " buckets, launched during backward)";
  const std::string algorithm = options_.algorithm == DdpOptions::Algorithm::kRing
                                    ? "ring (ours, blocking)"
                                    : std::string("builtin (non-blocking, ") + grad_comm_->backend() + ")";
  return "data parallel: " + std::to_string(d) + " ranks x " + std::to_string(batch_rows_ / d) + " rows, " + how +
         ", all-reduce " + algorithm;
}

void DdpStrategy::begin_step(const GlobalBatch& batch) {
  before_ = grad_comm_->stats();
  ddp_->begin_step(batch.micro_batches);
}

double run_data_parallel_rows(Communicator& comm, TrainModel& model, const GlobalBatch& batch, double loss_scale) {
  const int d = comm.size(), local = batch.rows / d;
  const std::size_t offset = static_cast<std::size_t>(comm.rank()) * local * batch.T;
  // Scaling each rank's loss by 1/d makes the sum over ranks the gradient of the mean loss.
  return accumulate_gradients(model, batch.inputs + offset, batch.targets + offset, local, batch.T, batch.micro_batches,
                              loss_scale / d);
}

double data_parallel_mean_loss(Communicator& comm, double local_loss) {
  comm.all_reduce(&local_loss, 1);  // the mean loss over the whole batch, for the report
  return local_loss / comm.size();
}

double DdpStrategy::run_micro_batches(TrainModel& model, const GlobalBatch& batch, double loss_scale) {
  return run_data_parallel_rows(comm_, model, batch, loss_scale);
}

void DdpStrategy::sync_gradients(TrainModel& /*model*/) {
  const DdpStepReport r = ddp_->finish_step();
  report_ = {};
  report_.hidden_fraction = r.hidden_fraction;
  report_.comm_seconds = r.comm_seconds;
  for (CommOp op : {CommOp::kAllReduce, CommOp::kRingAllReduce})
    report_.bytes_sent += grad_comm_->stats()[op].bytes_sent - before_[op].bytes_sent;
}

double DdpStrategy::mean_loss(double local_loss) { return data_parallel_mean_loss(comm_, local_loss); }

const Timeline* DdpStrategy::timeline() const { return &ddp_->timeline(); }

void DdpStrategy::save_weights(const TrainModel& model, const std::string& path) const {
  if (comm_.rank() == 0) ParallelStrategy::save_weights(model, path);
  comm_.barrier();  // the file is complete when any rank returns
}

void DdpStrategy::save_checkpoint(const TrainCheckpoint& checkpoint, const std::string& path) const {
  if (comm_.rank() == 0) ParallelStrategy::save_checkpoint(checkpoint, path);
  comm_.barrier();
}

}  // namespace scalelab
