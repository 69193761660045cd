// Stage 05: runs one rank's pipeline schedule (schedule/pipeline_schedule.hpp) with real messages.
//
// Every action of the rank's list runs in order:
//   forward         the chunk's forward on micro-batch i (tokens on model stage 0, else the
//                   received activations); its saved activations are stashed under i
//   backward        restores them, backward from the received gradient (or the loss on the last
//                   model stage, scaled by loss_scale / m), frees them
//   backward input  zb-h1's B: the same without the linear layers' weight gradients (taped)
//   backward weight zb-h1's W: the taped products; frees the activations
//   send            non-blocking (isend of a copy that the executor keeps until it completes)
//   receive         blocking, into a buffer the next compute action reads
// Messages are in the chunks' boundary type (dist/pipeline_message.hpp): fp32, or half under
// mixed precision; in host memory, or in device memory when the chunks compute on a GPU and the
// communicator moves device memory (NCCL, or host staging).
//
// Why no deadlock: sends never block, so a rank can only wait in a receive, for a message its
// neighbour sends right after a compute action that precedes it in the dependency order. The
// schedule builders' lists complete in the simulator (schedule/pipeline_sim.hpp), which runs the
// same rule (tests/dist/test_pipeline_schedule.cpp checks every schedule, p and m), so every
// receive's message is eventually sent. Messages carry a tag naming (micro-batch, model stage,
// direction), so a mismatched order is an error, not a wrong answer. NCCL has neither tags nor
// sends that never block; schedule/rendezvous.hpp checks a schedule under its rules, and over
// NCCL the pipeline strategy gives the executor lists whose stuck sends were moved later until
// they pass (rendezvous_schedules).
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "comm/communicator.hpp"
#include "core/memory.hpp"
#include "dist/pipeline_message.hpp"
#include "dist/pipeline_stage_model.hpp"
#include "dist/timeline.hpp"
#include "schedule/pipeline_schedule.hpp"

namespace scalelab {

// One compute action as it ran: seconds on the steady clock (the same clock on every process of
// one machine, so ranks' intervals line up).
struct MeasuredAction {
  Action action;
  double start_s = 0, end_s = 0;
};

struct PipelineStepStats {
  std::uint64_t activation_bytes_sent = 0, activation_bytes_received = 0;
  std::uint64_t grad_bytes_sent = 0, grad_bytes_received = 0;
  int peak_in_flight = 0;               // most micro-batch activation sets held at once
  double seconds = 0;                   // the step's schedule, wall clock
  std::vector<MeasuredAction> actions;  // compute actions
};

class PipelineExecutor {
 public:
  // pp: the pipeline group (rank r holds model stages r, r + p, ...), whose memory space is the
  // place's; timeline may be null.
  PipelineExecutor(Communicator& pp, const PipelineShape& shape, PipelineStageModel& model, MessagePlace place,
                   Timeline* timeline);

  // Runs `schedule` (this rank's list) over rows x T tokens and targets, cut into m micro-batches
  // of rows / m. Gradients accumulate (+=) into the model's. Returns the mean loss of the
  // micro-batches on the rank holding the last model stage, 0 elsewhere.
  double run(const RankSchedule& schedule, const int* inputs, const int* targets, int rows, int T, double loss_scale);
  // Forward only, through every model stage in turn: the mean loss of rows x T tokens on the rank
  // holding the last model stage, 0 elsewhere. Frees the activations as it goes.
  double evaluate(const int* inputs, const int* targets, int rows, int T);

  const PipelineStepStats& stats() const { return stats_; }

 private:
  struct Outgoing {
    Message data;
    Request request;
  };
  void forward(const Action& a);
  void backward(const Action& a, bool input_only);
  void backward_weight(const Action& a);
  // The message a receive filed for this compute action (grad: 0 activations, 1 gradient).
  Message take_received(int grad, const Action& a);
  // What this compute action produced, for the send that follows it.
  void keep_for_sending(int grad, const Action& a, Message message);
  void receive(const Action& a);
  void send(const Action& a);
  void finish_sends(bool all);
  int tag_of(const Action& a) const;
  bool has_previous(int chunk) const;
  bool has_next(int chunk) const;
  std::size_t message_elements() const;
  DataType message_type() const { return model_.chunk_at(0).boundary_type(); }

  Communicator& pp_;
  PipelineShape shape_;
  PipelineStageModel& model_;
  MessagePlace place_;  // where messages live: host memory, or the GPU's
  Timeline* timeline_;
  int rank_;
  // The current step.
  const int* inputs_ = nullptr;
  const int* targets_ = nullptr;
  int micro_ = 0, T_ = 0;
  double loss_scale_ = 1, loss_sum_ = 0;
  int in_flight_ = 0;
  std::map<std::tuple<int, int, int>, Message> inbox_;   // (is grad, micro-batch, chunk): received
  std::map<std::tuple<int, int, int>, Message> outbox_;  // (is grad, micro-batch, chunk): to send
  std::vector<Outgoing> sending_;
  PipelineStepStats stats_;
};

}  // namespace scalelab
