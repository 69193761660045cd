// Data parallelism: bucket planning, launching all-reduces from backward, waiting for them.
#include "dist/ddp.hpp"

#include <algorithm>
#include <string>

#include "comm/ring.hpp"
#include "core/error.hpp"

namespace scalelab {

DdpOptions::Mode DdpOptions::parse_mode(const std::string& text) {
  if (text == "naive") return Mode::kNaive;
  if (text == "bucketed") return Mode::kBucketed;
  throw ConfigError("ddp: unknown mode '" + text + "'; use naive or bucketed (or none for one process)");
}

DdpOptions::Algorithm DdpOptions::parse_algorithm(const std::string& text) {
  if (text == "builtin") return Algorithm::kBuiltin;
  if (text == "ring") return Algorithm::kRing;
  throw ConfigError("allreduce: unknown algorithm '" + text + "'; use builtin (the backend's) or ring (ours)");
}

std::vector<std::pair<std::size_t, std::size_t>> plan_buckets(const ParamLayout& layout, std::size_t first_bytes,
                                                              std::size_t bucket_bytes) {
  require(first_bytes > 0 && bucket_bytes > 0, "bucket_bytes", "must be positive", "pass e.g. --bucket-mb 25");
  std::vector<std::pair<std::size_t, std::size_t>> out;
  // LAB 04 BEGIN plan_buckets: section 6
  const auto& tensors = layout.tensors();
  std::size_t end = layout.num_params(), begin = end;
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) {
    begin = it->offset;  // tensors are contiguous and ordered, so the bucket grows downwards
    const std::size_t cap = out.empty() ? first_bytes : bucket_bytes;
    if ((end - begin) * sizeof(float) >= cap) {
      out.emplace_back(begin, end);
      end = begin;
    }
  }
  if (begin < end) out.emplace_back(begin, end);
  // LAB 04 END
  return out;
}

void check_replicas_agree(Communicator& comm, const std::string& description) {
  // Rank 0's description travels to everyone (length first); each rank compares, and a sum of
  // "I differ" flags tells every rank whether, and which first rank, disagreed.
  std::int64_t len = static_cast<std::int64_t>(description.size());
  comm.broadcast(&len, 1, 0);
  std::string root(static_cast<std::size_t>(len), '\0');
  if (comm.rank() == 0) root = description;
  comm.broadcast(root.data(), root.size(), DataType::kUInt8, 0);
  const bool differs = root != description;
  std::vector<std::int32_t> flags(comm.size(), 0);
  flags[comm.rank()] = differs ? 1 : 0;
  comm.all_reduce(flags.data(), flags.size(), ReduceOp::kSum);
  for (int r = 0; r < comm.size(); ++r)
    if (flags[r])
      throw ConfigError("ddp: rank " + std::to_string(r) +
                        " was started with different settings than rank 0 (rank 0: " + root +
                        (comm.rank() == r ? "; this rank: " + description : "") +
                        "); start every rank with the same --config, --seed, --batch and data");
}

DataParallel::DataParallel(Communicator& comm, TrainModel& model, const DdpOptions& options)
    : comm_(comm), model_(model), options_(options) {
  const DataType type = model_.typed_grads().type;  // a model without such a buffer throws its ConfigError here
  // A communicator handed pointers from the wrong memory space would crash (or read garbage)
  // far from the mistake: say so here instead.
  const bool on_device = model_.grads_memory_space() == MemorySpace::kDevice;
  if (comm_.memory_space() != model_.grads_memory_space())
    throw ConfigError(std::string("ddp: the model's gradients are in ") + (on_device ? "GPU" : "host") +
                      " memory but the '" + comm_.backend() + "' communicator works on " +
                      (on_device ? "host" : "GPU") + " memory; " +
                      (on_device ? "give DDP a device communicator (NCCL, or the host-staging adapter over MPI)"
                                 : "use a host-memory backend (local or mpi) with --device cpu"));
  if (on_device && options_.algorithm == DdpOptions::Algorithm::kRing)
    throw ConfigError(
        "allreduce: ring adds the received pieces on the host, so it cannot reduce GPU gradients; use "
        "--allreduce builtin with --device cuda");
  if (type != DataType::kFloat32 && options_.algorithm == DdpOptions::Algorithm::kRing)
    throw ConfigError(
        std::string("allreduce: ring (comm/ring.hpp) adds fp32 gradients, and this model keeps them in ") +
        dtype_name(type) + "; use --allreduce builtin with --precision bf16 or fp16");
  // The caps are bytes of gradient: a bucket of 16-bit gradients holds twice the elements.
  const std::size_t per_float = sizeof(float) / dtype_size(type);
  ranges_ = plan_buckets(model_.layout(), options_.first_bucket_bytes * per_float, options_.bucket_bytes * per_float);
  if (options_.mode == DdpOptions::Mode::kBucketed)
    model_.set_grad_ready_hook([this](std::size_t offset) { on_grads_ready(offset); });
}

DataParallel::~DataParallel() {
  if (options_.mode == DdpOptions::Mode::kBucketed) model_.set_grad_ready_hook({});
}

void DataParallel::begin_step(int micro_batches) {
  buckets_.clear();
  for (const auto& [b, e] : ranges_) buckets_.push_back({b, e, {}, false, false, 0, 0, -1});
  notified_offsets_.clear();
  next_ = 0;
  backwards_left_ = micro_batches - 1;
  active_ = backwards_left_ == 0;
  notified_ = false;
  timeline_.clear();
}

void DataParallel::all_reduce_now(TrainModel::GradBuffer data, std::size_t count) {
  if (options_.algorithm == DdpOptions::Algorithm::kRing)
    ring_all_reduce(comm_, static_cast<float*>(data.data), count);  // fp32 only (the constructor checks)
  else
    comm_.all_reduce(data.data, data.data, count, data.type, ReduceOp::kSum);
}

void DataParallel::launch(Bucket& b) {
  const TrainModel::GradBuffer g = model_.typed_grads() + b.begin;
  b.started = true;
  b.start_us = timeline_.now_us();
  b.launched_at = static_cast<int>(notified_offsets_.size()) - 1;
  if (options_.algorithm == DdpOptions::Algorithm::kBuiltin) {
    b.request = comm_.iall_reduce(g.data, g.data, b.end - b.begin, g.type, ReduceOp::kSum);
  } else {
    // Our ring is blocking: correct, but it cannot overlap backward (the timeline shows it).
    all_reduce_now(g, b.end - b.begin);
    b.done = true;
    b.end_us = timeline_.now_us();
  }
}

void DataParallel::poll() {
  for (auto& b : buckets_)
    if (b.started && !b.done && comm_.test(b.request)) {
      b.done = true;
      b.end_us = timeline_.now_us();
    }
}

void DataParallel::on_grads_ready(std::size_t offset) {
  if (!active_) {
    // A non-final micro-batch: no communication; the end of its backward (offset 0) counts.
    if (offset == 0 && --backwards_left_ == 0) active_ = true;
    return;
  }
  // The compute since the previous notification (the time spent here launching is not compute:
  // a blocking all-reduce inside launch() hides nothing).
  const double now = timeline_.now_us();
  if (notified_) timeline_.add("backward", "compute", 0, last_ready_us_, now);
  notified_ = true;
  notified_offsets_.push_back(offset);
  // LAB 04 BEGIN ddp_launch_ready_buckets: section 6
  while (next_ < buckets_.size() && buckets_[next_].begin >= offset) launch(buckets_[next_++]);
  poll();  // MPI progresses non-blocking operations inside its calls: give it a chance
  // LAB 04 END
  last_ready_us_ = timeline_.now_us();
}

std::vector<int> DataParallel::launch_notifications() const {
  std::vector<int> at;
  for (const Bucket& b : buckets_) at.push_back(b.launched_at);
  return at;
}

DdpStepReport DataParallel::finish_step() {
  const double backward_end = timeline_.now_us();
  // The last stretch of backward: from the last notification (the embeddings) to here.
  if (notified_) timeline_.add("backward", "compute", 0, last_ready_us_, backward_end);
  DdpStepReport report;
  const TrainModel::GradBuffer g = model_.typed_grads();
  if (options_.mode == DdpOptions::Mode::kNaive) {
    // LAB 04 BEGIN ddp_naive: section 5
    for (const auto& t : model_.layout().tensors()) all_reduce_now(g + t.offset, t.numel);
    // LAB 04 END
    timeline_.add("all-reduce (per tensor)", "comm", 1, backward_end, timeline_.now_us());
  } else {
    while (next_ < buckets_.size()) {  // if a notification never came
      Bucket& b = buckets_[next_++];
      launch(b);
      b.launched_at = -1;
    }
    for (auto& b : buckets_) {
      if (!b.done) {
        comm_.wait(b.request);
        b.done = true;
        b.end_us = timeline_.now_us();
      }
      timeline_.add("all-reduce bucket [" + std::to_string(b.begin) + ", " + std::to_string(b.end) + ")", "comm", 1,
                    b.start_us, b.end_us);
    }
  }
  report.hidden_fraction = hidden_fraction(timeline_.events());
  report.comm_seconds = comm_busy_us(timeline_.events()) * 1e-6;
  report.buckets = bucket_count();
  active_ = false;
  return report;
}

}  // namespace scalelab
