// Stage 05: pipeline schedules as data. A schedule is, for every pipeline rank, the ordered list
// of what that rank does in one optimizer step: forward or backward of micro-batch i on one of
// its model chunks, and the sends and receives around them. The builders here are pure
// functions (no communication, no model), so one process can test the warm-up counts, the peak
// number of micro-batches in flight and the bubble a schedule implies; the executor
// (dist/pipeline_executor.hpp) runs the same lists with real messages.
//
// The model is cut into S = p * v model stages (v = 1 except interleaved). Rank r holds the
// chunks c = 0..v-1, chunk c being model stage c * p + r (Megatron's interleaved assignment).
// Micro-batch i's activations flow from model stage s to s + 1, its gradients from s + 1 to s.
//
//   afab (GPipe)   all m forwards, then all m backwards
//   1f1b           warm-up min(p - r - 1, m) forwards, then one forward one backward, then the
//                  remaining backwards (cool-down)
//   interleaved:V  1F1B over v chunks per rank, micro-batches in groups of p per chunk
//                  (Megatron's order); warm-up (p - r - 1) * 2 + (v - 1) * p; m a multiple of p
//   zb-h1          1F1B's order of forwards and input-gradient backwards (B); the weight
//                  gradients (W) deferred, as late as keeping at most min(p, m) micro-batches in
//                  flight allows (1F1B's peak, on rank 0), so they fill the cool-down's bubble
#pragma once

#include <string>
#include <vector>

namespace scalelab {

enum class PipeScheduleKind { kAfab, k1F1B, kInterleaved, kZbH1 };

struct PipelineShape {
  PipeScheduleKind kind = PipeScheduleKind::k1F1B;
  int stages = 1;         // p: pipeline ranks
  int micro_batches = 1;  // m: per optimizer step (per data-parallel replica)
  int chunks = 1;         // v: model chunks per rank (interleaved; 1 otherwise)

  int model_stages() const { return stages * chunks; }
  // Throws ConfigError naming the setting and the fix: p, m, v >= 1; v > 1 only for interleaved,
  // interleaved needs v >= 2 and m a multiple of p.
  void validate() const;
};

// "afab" (also "gpipe"), "1f1b", "interleaved:V" (V >= 2 model chunks per rank), "zb-h1".
// Throws ConfigError naming --schedule and the accepted forms.
PipelineShape parse_pipeline_schedule(const std::string& text, int stages, int micro_batches);
// The canonical name: "afab", "1f1b", "interleaved:2", "zb-h1".
std::string schedule_name(const PipelineShape& shape);

enum class ActionKind {
  kForward,         // forward of (micro_batch, chunk)
  kBackward,        // input and weight gradients together
  kBackwardInput,   // zb-h1's B: the input gradient only (what the previous stage waits for)
  kBackwardWeight,  // zb-h1's W: the deferred weight gradients
  kRecvActivation,  // the forward's input, from the previous model stage
  kSendActivation,  // the forward's output, to the next model stage
  kRecvGrad,        // d loss / d output, from the next model stage
  kSendGrad,        // d loss / d input, to the previous model stage
};

struct Action {
  ActionKind kind = ActionKind::kForward;
  int micro_batch = 0;
  int chunk = 0;  // this rank's chunk, 0..v-1
  bool operator==(const Action&) const = default;
};

using RankSchedule = std::vector<Action>;

// In words, for messages: "receive gradient of micro-batch 3 (chunk 0)".
std::string describe_action(const Action& action);

// Model stage of a rank's chunk: chunk * p + rank.
int model_stage(const PipelineShape& shape, int rank, int chunk);
// The rank a send or receive action talks to (the rank of the neighbouring model stage).
int action_peer(const PipelineShape& shape, int rank, const Action& action);

// The compute actions only (kForward, kBackward, kBackwardInput, kBackwardWeight), in order.
RankSchedule afab_order(int stages, int micro_batches, int rank);
RankSchedule one_f_one_b_order(int stages, int micro_batches, int rank);
RankSchedule interleaved_order(int stages, int micro_batches, int chunks, int rank);
RankSchedule zb_h1_order(int stages, int micro_batches, int rank);
RankSchedule compute_order(const PipelineShape& shape, int rank);

// The compute order with the messages added: a receive right before each forward that has a
// previous model stage and each backward that has a next one; a send right after each forward
// that has a next model stage and each backward (zb-h1: input backward) that has a previous one.
RankSchedule with_communication(const PipelineShape& shape, int rank, const RankSchedule& compute);
// compute_order + with_communication, for one rank and for all.
RankSchedule build_schedule(const PipelineShape& shape, int rank);
std::vector<RankSchedule> build_schedules(const PipelineShape& shape);

// Forwards before the first backward (of either kind).
int warmup_forwards(const RankSchedule& schedule);
// The formula for that count on rank r. It is the warm-up phase w (1f1b and zb-h1:
// min(p - r - 1, m); interleaved: min((p - r - 1) * 2 + (v - 1) * p, v * m)) plus 1 where a steady
// state follows, because the steady state's first forward also runs before the first backward;
// afab: m. (A list alone cannot tell a 1f1b warm-up of m - 1 followed by one F-B pair from afab.)
int warmup_forwards_formula(const PipelineShape& shape, int rank);
// The most (micro-batch, chunk) pairs whose forward ran and whose weight gradient (kBackward or
// kBackwardWeight) has not: how many sets of saved activations the rank holds at once.
int peak_in_flight(const RankSchedule& schedule);
// The formulas for that peak on rank r: afab m; 1f1b min(p - r, m); interleaved
// min((p - r - 1) * 2 + (v - 1) * p + 1, v * m); zb-h1 min(p, m).
int peak_in_flight_formula(const PipelineShape& shape, int rank);

}  // namespace scalelab
