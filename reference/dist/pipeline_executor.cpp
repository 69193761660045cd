// The pipeline executor: one rank's action list, run with point-to-point messages (stage 05).
#include "dist/pipeline_executor.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.hpp"
#include "schedule/pipeline_sim.hpp"

namespace scalelab {

namespace {

double clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool is_grad(ActionKind k) { return k == ActionKind::kRecvGrad || k == ActionKind::kSendGrad; }

const char* short_name(ActionKind k) {
  switch (k) {
    case ActionKind::kForward: return "F";
    case ActionKind::kBackward: return "B";
    case ActionKind::kBackwardInput: return "B(input)";
    case ActionKind::kBackwardWeight: return "W";
    case ActionKind::kRecvActivation: return "recv act";
    case ActionKind::kSendActivation: return "send act";
    case ActionKind::kRecvGrad: return "recv grad";
    case ActionKind::kSendGrad: return "send grad";
  }
  return "?";
}

}  // namespace

PipelineExecutor::PipelineExecutor(Communicator& pp, const PipelineShape& shape, PipelineStageModel& model,
                                   MessagePlace place, Timeline* timeline)
    : pp_(pp), shape_(shape), model_(model), place_(place), timeline_(timeline), rank_(pp.rank()) {
  // (A host communicator with device messages is the tests' CPU twin of a GPU's: its "device"
  // memory is host memory.)
  SCALELAB_CHECK(pp.memory_space() == MemorySpace::kHost || place.on_device(), "the pipeline's ", pp.backend(),
                 " communicator moves device memory, but its messages are in host memory");
  SCALELAB_CHECK(pp.size() == shape.stages, "the pipeline group has ", pp.size(), " ranks, the schedule ",
                 shape.stages);
  SCALELAB_CHECK(model.chunk_count() == shape.chunks, "the stage holds ", model.chunk_count(), " chunks, the schedule ",
                 shape.chunks);
}

bool PipelineExecutor::has_previous(int chunk) const { return model_stage(shape_, rank_, chunk) > 0; }
bool PipelineExecutor::has_next(int chunk) const {
  return model_stage(shape_, rank_, chunk) < shape_.model_stages() - 1;
}

// A micro-batch's activations (or their gradient) between two chunks: micro x T x C, or this
// rank's rows of them when the chunks are split with sequence parallelism (tp x pp).
std::size_t PipelineExecutor::message_elements() const { return model_.chunk_at(0).boundary_elements(micro_, T_); }

// Both ends compute the same tag from the micro-batch and the model stage the message leaves:
// activations leave stage s forward, gradients leave stage s + 1 backward (tagged with s).
int PipelineExecutor::tag_of(const Action& a) const {
  const int s = model_stage(shape_, rank_, a.chunk);
  const bool incoming = a.kind == ActionKind::kRecvActivation || a.kind == ActionKind::kRecvGrad;
  int boundary = 0;  // the lower model stage of the two the message runs between
  if (is_grad(a.kind))
    boundary = incoming ? s : s - 1;
  else
    boundary = incoming ? s - 1 : s;
  return 2 * (a.micro_batch * shape_.model_stages() + boundary) + (is_grad(a.kind) ? 1 : 0);
}

double PipelineExecutor::run(const RankSchedule& schedule, const int* inputs, const int* targets, int rows, int T,
                             double loss_scale) {
  const int m = shape_.micro_batches;
  require(rows % m == 0, "micro_batches",
          std::to_string(rows) + " rows per pipeline do not split into " + std::to_string(m) + " micro-batches",
          "choose --batch divisible by (--dp x --micro-batches)");
  inputs_ = inputs;
  targets_ = targets;
  micro_ = rows / m;
  T_ = T;
  loss_scale_ = loss_scale;
  loss_sum_ = 0;
  in_flight_ = 0;
  stats_ = {};
  const double t0 = clock_seconds();
  for (const Action& a : schedule) {
    const double start = clock_seconds();
    switch (a.kind) {
      case ActionKind::kForward: forward(a); break;
      case ActionKind::kBackward: backward(a, false); break;
      case ActionKind::kBackwardInput: backward(a, true); break;
      case ActionKind::kBackwardWeight: backward_weight(a); break;
      case ActionKind::kRecvActivation:
      case ActionKind::kRecvGrad: receive(a); break;
      case ActionKind::kSendActivation:
      case ActionKind::kSendGrad: send(a); break;
    }
    const double end = clock_seconds();
    const bool compute = is_compute(a.kind);
    if (compute) stats_.actions.push_back({a, start, end});
    if (timeline_ && a.kind != ActionKind::kSendActivation && a.kind != ActionKind::kSendGrad) {
      const double origin_us = timeline_->origin_clock_us();  // the same steady clock as start and end
      timeline_->add(std::string(short_name(a.kind)) + " mb" + std::to_string(a.micro_batch) +
                         (shape_.chunks > 1 ? " c" + std::to_string(a.chunk) : ""),
                     compute ? "compute" : "comm", compute ? 0 : 1, start * 1e6 - origin_us, end * 1e6 - origin_us);
    }
  }
  finish_sends(true);
  SCALELAB_CHECK(inbox_.empty() && outbox_.empty() && model_.stashed_count() == 0,
                 "the pipeline schedule left messages or activations behind on rank ", rank_);
  stats_.seconds = clock_seconds() - t0;
  return model_.holds_head() ? loss_sum_ / m : 0.0;
}

Message PipelineExecutor::take_received(int grad, const Action& a) {
  const auto it = inbox_.find({grad, a.micro_batch, a.chunk});
  SCALELAB_CHECK(it != inbox_.end(), "rank ", rank_, ": ", describe_action(a), " before its ",
                 grad ? "gradient" : "activations", " were received (a schedule without the receive)");
  Message m = std::move(it->second);
  inbox_.erase(it);
  return m;
}

void PipelineExecutor::keep_for_sending(int grad, const Action& a, Message message) {
  outbox_[{grad, a.micro_batch, a.chunk}] = std::move(message);
}

void PipelineExecutor::forward(const Action& a) {
  PipelineChunk& chunk = model_.chunk_at(a.chunk);
  const std::size_t offset = static_cast<std::size_t>(a.micro_batch) * micro_ * T_;
  const int* tokens = chunk.slice().embeddings ? inputs_ + offset : nullptr;
  const int* targets = chunk.slice().head ? targets_ + offset : nullptr;
  Message input = has_previous(a.chunk) ? take_received(0, a) : Message();
  const float loss = chunk.forward_message(tokens, input, targets, micro_, T_);
  if (chunk.slice().head) loss_sum_ += loss;
  if (has_next(a.chunk)) keep_for_sending(0, a, chunk.output_message(message_elements(), place_));
  chunk.stash_activations(a.micro_batch);
  stats_.peak_in_flight = std::max(stats_.peak_in_flight, static_cast<int>(model_.stashed_count()));
}

void PipelineExecutor::backward(const Action& a, bool input_only) {
  PipelineChunk& chunk = model_.chunk_at(a.chunk);
  chunk.restore_activations(a.micro_batch);
  Message dout = has_next(a.chunk) ? take_received(1, a) : Message();
  // Each micro-batch's loss is a mean over its own rows: 1/m makes the sum over the m
  // micro-batches the gradient of the whole batch's mean (as stage 01's accumulation).
  const float scale = static_cast<float>(loss_scale_ / shape_.micro_batches);
  if (input_only)
    chunk.backward_input(dout.as_float(), scale);
  else
    chunk.backward_message(dout, scale);
  if (has_previous(a.chunk)) keep_for_sending(1, a, chunk.input_grad_message(message_elements(), place_));
  if (input_only)
    chunk.stash_activations(a.micro_batch);  // W still reads them
  else
    chunk.release_activations();
}

void PipelineExecutor::backward_weight(const Action& a) {
  PipelineChunk& chunk = model_.chunk_at(a.chunk);
  chunk.restore_activations(a.micro_batch);
  chunk.backward_weight();
  chunk.release_activations();
}

void PipelineExecutor::receive(const Action& a) {
  // LAB 05 BEGIN pipeline_receive: section 3
  // Into a fresh buffer of one micro-batch's activations (or their gradient), from the neighbour
  // and with the tag both ends compute; the compute action that follows takes it from the inbox.
  const int grad = is_grad(a.kind) ? 1 : 0;
  Message in(message_elements(), message_type(), place_);
  pp_.recv(in.data(), in.size(), in.type(), action_peer(shape_, rank_, a), tag_of(a));
  (grad ? stats_.grad_bytes_received : stats_.activation_bytes_received) += in.bytes();
  inbox_[{grad, a.micro_batch, a.chunk}] = std::move(in);
  finish_sends(false);  // free the copies of sends that completed meanwhile
  // LAB 05 END
}

void PipelineExecutor::send(const Action& a) {
  // LAB 05 BEGIN pipeline_send: section 3
  // The compute action before this one left its output in the outbox. Send it without blocking
  // (a blocking send could wait for a receive its neighbour posts only later) and keep the copy
  // alive in sending_ until the send completes.
  const int grad = is_grad(a.kind) ? 1 : 0;
  const auto it = outbox_.find({grad, a.micro_batch, a.chunk});
  SCALELAB_CHECK(it != outbox_.end(), "rank ", rank_, ": ", short_name(a.kind), " of micro-batch ", a.micro_batch,
                 " chunk ", a.chunk, " before the compute that produces it");
  Outgoing out{std::move(it->second), Request()};
  outbox_.erase(it);
  out.request = pp_.isend(out.data.data(), out.data.size(), out.data.type(), action_peer(shape_, rank_, a), tag_of(a));
  (grad ? stats_.grad_bytes_sent : stats_.activation_bytes_sent) += out.data.bytes();
  sending_.push_back(std::move(out));
  // LAB 05 END
}

// Frees the copies of sends that completed (all of them, waiting, at the end of the step).
void PipelineExecutor::finish_sends(bool all) {
  std::vector<Outgoing> still;
  for (Outgoing& s : sending_) {
    if (all)
      pp_.wait(s.request);
    else if (!pp_.test(s.request)) {
      still.push_back(std::move(s));
      continue;
    }
  }
  sending_ = std::move(still);
}

double PipelineExecutor::evaluate(const int* inputs, const int* targets, int rows, int T) {
  micro_ = rows;
  T_ = T;
  double loss = 0;
  const int S = shape_.model_stages();
  const std::size_t n = message_elements();
  for (int s = 0; s < S; ++s) {
    if (s % shape_.stages != rank_) continue;
    PipelineChunk& chunk = model_.chunk_at(s / shape_.stages);
    Message in;
    if (s > 0) {
      in = Message(n, message_type(), place_);
      pp_.recv(in.data(), n, in.type(), (s - 1) % shape_.stages, 2 * s);
    }
    const float l = chunk.forward_message(inputs, in, targets, rows, T);
    if (s == S - 1) loss = l;
    if (s < S - 1) {
      Message out = chunk.output_message(n, place_);
      pp_.send(out.data(), n, out.type(), (s + 1) % shape_.stages, 2 * (s + 1));
    }
    chunk.release_activations();
  }
  return loss;
}

}  // namespace scalelab
