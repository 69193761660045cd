// Stage 05: the schedule simulator (see pipeline_sim.hpp): event times, deadlock and ordering
// checks, the bubble, simulated and by formula, and the text Gantt chart.
#include "schedule/pipeline_sim.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "core/error.hpp"

namespace scalelab {

namespace {

bool is_send(ActionKind k) { return k == ActionKind::kSendActivation || k == ActionKind::kSendGrad; }
bool is_activation(ActionKind k) { return k == ActionKind::kSendActivation || k == ActionKind::kRecvActivation; }

// A posted message: what it carries and when it left.
struct Message {
  int micro_batch = 0;
  int to_stage = 0;  // the receiving model stage
  int from_rank = 0;
  Action send;
  double posted = 0;
};

// Messages from one rank to another of one kind, matched in posting order.
struct Channel {
  std::vector<Message> sent;
  std::size_t received = 0;
};
using ChannelKey = std::tuple<int, int, bool>;  // from rank, to rank, activation (else gradient)

// The earliest start and latest end of the compute actions; {0, 0} without any.
std::pair<double, double> compute_span(const std::vector<std::vector<TimedAction>>& ranks) {
  double first = std::numeric_limits<double>::infinity(), last = -first;
  for (const auto& rank : ranks)
    for (const TimedAction& t : rank)
      if (is_compute(t.action.kind)) {
        first = std::min(first, t.start);
        last = std::max(last, t.end);
      }
  return first <= last ? std::make_pair(first, last) : std::make_pair(0.0, 0.0);
}

double compute_busy(const std::vector<std::vector<TimedAction>>& ranks) {
  double busy = 0;
  for (const auto& rank : ranks)
    for (const TimedAction& t : rank)
      if (is_compute(t.action.kind)) busy += t.end - t.start;
  return busy;
}

}  // namespace

bool is_compute(ActionKind kind) {
  return kind == ActionKind::kForward || kind == ActionKind::kBackward || kind == ActionKind::kBackwardInput ||
         kind == ActionKind::kBackwardWeight;
}

double action_cost(const ActionCosts& costs, ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward: return costs.forward;
    case ActionKind::kBackward: return costs.backward_input + costs.backward_weight;
    case ActionKind::kBackwardInput: return costs.backward_input;
    case ActionKind::kBackwardWeight: return costs.backward_weight;
    default: return 0;
  }
}

PipelineTimeline simulate_pipeline(const PipelineShape& shape, const std::vector<RankSchedule>& schedules,
                                   const ActionCosts& costs) {
  const int p = shape.stages;
  SCALELAB_CHECK(static_cast<int>(schedules.size()) == p, "simulate_pipeline: ", schedules.size(), " action lists for ",
                 p, " ranks");
  std::map<ChannelKey, Channel> channels;
  std::vector<std::size_t> next(p, 0);  // each rank's next action
  std::vector<double> clock(p, 0.0);    // when each rank is free
  PipelineTimeline out;
  out.ranks.resize(p);

  // Runs rank r until it finishes or reaches a receive whose send has not been posted; returns
  // whether it ran anything. Sends never wait, so the order in which ranks are visited does not
  // change any time.
  const auto advance = [&](int r) {
    bool moved = false;
    while (next[r] < schedules[r].size()) {
      const Action& a = schedules[r][next[r]];
      TimedAction timed{a, clock[r], clock[r]};
      if (is_compute(a.kind)) {
        timed.end = clock[r] + action_cost(costs, a.kind);
      } else {
        const int peer = action_peer(shape, r, a);
        const int stage = model_stage(shape, r, a.chunk);
        if (is_send(a.kind)) {
          const int to_stage = a.kind == ActionKind::kSendActivation ? stage + 1 : stage - 1;
          channels[{r, peer, is_activation(a.kind)}].sent.push_back({a.micro_batch, to_stage, r, a, clock[r]});
        } else {
          Channel& ch = channels[{peer, r, is_activation(a.kind)}];
          if (ch.received == ch.sent.size()) return moved;  // blocked until the peer sends
          const Message& msg = ch.sent[ch.received++];
          if (msg.micro_batch != a.micro_batch || msg.to_stage != stage)
            throw Error("pipeline schedule: rank " + std::to_string(r) + "'s " + describe_action(a) + " (action " +
                        std::to_string(next[r]) + ") matches rank " + std::to_string(msg.from_rank) + "'s " +
                        describe_action(msg.send) + ", which is for micro-batch " + std::to_string(msg.micro_batch) +
                        ", model stage " + std::to_string(msg.to_stage) +
                        ": the two ranks post these messages in different orders");
          timed.end = std::max(clock[r], msg.posted + costs.transfer);
        }
      }
      clock[r] = timed.end;
      out.ranks[r].push_back(timed);
      ++next[r];
      moved = true;
    }
    return moved;
  };

  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < p; ++r) moved = advance(r) || moved;
  }
  std::string blocked;
  for (int r = 0; r < p; ++r) {
    if (next[r] == schedules[r].size()) continue;
    const Action& a = schedules[r][next[r]];
    blocked += "\n  rank " + std::to_string(r) + " waits at action " + std::to_string(next[r]) + ", " +
               describe_action(a) + " from rank " + std::to_string(action_peer(shape, r, a));
  }
  if (!blocked.empty()) throw Error("pipeline schedule " + schedule_name(shape) + " deadlocks:" + blocked);

  // No receive left unmatched means every send was received too only if the counts agree.
  for (const auto& [key, ch] : channels)
    if (ch.received != ch.sent.size()) {
      const Message& msg = ch.sent[ch.received];
      throw Error("pipeline schedule: rank " + std::to_string(std::get<0>(key)) + "'s " + describe_action(msg.send) +
                  " to rank " + std::to_string(std::get<1>(key)) + " is never received");
    }

  const auto [first, last] = compute_span(out.ranks);
  out.makespan = last - first;
  out.busy = compute_busy(out.ranks);
  out.bubble_fraction = bubble_fraction(out.ranks);
  return out;
}

double bubble_fraction(const std::vector<std::vector<TimedAction>>& ranks) {
  const auto [first, last] = compute_span(ranks);
  const double total = static_cast<double>(ranks.size()) * (last - first);
  if (total <= 0) return 0;
  return (total - compute_busy(ranks)) / total;
}

double bubble_fraction_formula(const PipelineShape& shape, const ActionCosts& costs) {
  const double p = shape.stages, m = shape.micro_batches, v = shape.chunks;
  switch (shape.kind) {
    case PipeScheduleKind::kAfab:
    case PipeScheduleKind::k1F1B: return (p - 1) / (m + p - 1);
    case PipeScheduleKind::kInterleaved: return (p - 1) / (v * m + p - 1);
    case PipeScheduleKind::kZbH1: {
      const double f = costs.forward, b = costs.backward_input, w = costs.backward_weight;
      const double idle = (p - 1) * (f + b - w);
      return idle / (m * (f + b + w) + idle);
    }
  }
  return 0;
}

std::string bubble_formula_text(const PipelineShape& shape) {
  switch (shape.kind) {
    case PipeScheduleKind::kAfab:
    case PipeScheduleKind::k1F1B: return "(p-1)/(m+p-1)";
    case PipeScheduleKind::kInterleaved: return "(p-1)/(v*m+p-1)";
    case PipeScheduleKind::kZbH1: return "(p-1)(F+B-W)/(m(F+B+W)+(p-1)(F+B-W)) [m >= p, W <= F]";
  }
  return "?";
}

std::string gantt_chart(const PipelineShape& shape, const PipelineTimeline& timeline, int width,
                        const ActionCosts& costs) {
  require(width >= 1, "width", "must be at least 1, got " + std::to_string(width), "pass e.g. --width 80");
  const auto span = compute_span(timeline.ranks);
  const double first = span.first, last = span.second;
  const double column = last > first ? (last - first) / width : 1.0;
  const auto to_column = [&](double t) { return static_cast<int>(std::lround((t - first) / column)); };
  std::ostringstream os;
  for (std::size_t r = 0; r < timeline.ranks.size(); ++r) {
    std::string row(static_cast<std::size_t>(width), '.');
    for (const TimedAction& t : timeline.ranks[r]) {
      if (!is_compute(t.action.kind)) continue;
      const char letter = t.action.kind == ActionKind::kForward          ? 'F'
                          : t.action.kind == ActionKind::kBackwardWeight ? 'W'
                                                                         : 'B';
      const int begin = std::clamp(to_column(t.start), 0, width - 1);
      const int end = std::clamp(to_column(t.end), begin + 1, width);
      for (int c = begin; c < end; ++c)
        row[c] = c == begin ? letter : static_cast<char>('0' + t.action.micro_batch % 10);
    }
    os << "rank " << r << " |" << row << "|\n";
  }
  const double formula = bubble_fraction_formula(shape, costs);
  char line[256];
  std::snprintf(line, sizeof line,
                "one column = %.4g time units; F forward, B backward, W weight backward, digit: micro-batch\n", column);
  os << line;
  std::snprintf(line, sizeof line, "bubble %s p=%d m=%d: simulated %.6f, formula %s = %.6f\n",
                schedule_name(shape).c_str(), shape.stages, shape.micro_batches, timeline.bubble_fraction,
                bubble_formula_text(shape).c_str(), formula);
  os << line;
  return os.str();
}

}  // namespace scalelab
