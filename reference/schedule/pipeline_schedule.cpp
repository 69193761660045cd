// Stage 05: the pipeline schedules as per-rank action lists (see pipeline_schedule.hpp), the
// checks on their settings, and the numbers a schedule implies (warm-up, peak in flight).
#include "schedule/pipeline_schedule.hpp"

#include <algorithm>
#include <charconv>
#include <deque>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace scalelab {

namespace {

std::string str(int v) { return std::to_string(v); }

const char* const kScheduleForms =
    "use --schedule afab (or gpipe), 1f1b, interleaved:V (V >= 2 chunks per rank) or zb-h1";

bool is_backward(ActionKind kind) {
  return kind == ActionKind::kBackward || kind == ActionKind::kBackwardInput || kind == ActionKind::kBackwardWeight;
}

}  // namespace

void PipelineShape::validate() const {
  require(stages >= 1, "pp", "must be at least 1, got " + str(stages), "use --pp 1 for no pipeline");
  require(micro_batches >= 1, "micro_batches", "must be at least 1, got " + str(micro_batches),
          "pass e.g. --micro-batches " + str(std::max(stages, 1) * 2));
  require(chunks >= 1, "schedule", "needs at least 1 model chunk per rank, got " + str(chunks), kScheduleForms);
  if (kind != PipeScheduleKind::kInterleaved) {
    require(chunks == 1, "schedule", "only interleaved:V has several model chunks per rank, got " + str(chunks),
            "use --schedule interleaved:" + str(chunks));
    return;
  }
  require(chunks >= 2, "schedule", "interleaved needs V >= 2 model chunks per rank, got " + str(chunks),
          "use --schedule interleaved:2, or 1f1b for one chunk");
  // Megatron's order takes the micro-batches in groups of p per chunk: a partial group has no place.
  const int lower = micro_batches / stages * stages;
  require(micro_batches % stages == 0, "micro_batches",
          "interleaved needs --micro-batches to be a multiple of --pp " + str(stages) + ", got " + str(micro_batches),
          "use --micro-batches " + str(lower + stages) + (lower > 0 ? " or " + str(lower) : std::string()));
}

PipelineShape parse_pipeline_schedule(const std::string& text, int stages, int micro_batches) {
  PipelineShape shape;
  shape.stages = stages;
  shape.micro_batches = micro_batches;
  const std::string prefix = "interleaved:";
  if (text == "afab" || text == "gpipe") {
    shape.kind = PipeScheduleKind::kAfab;
  } else if (text == "1f1b") {
    shape.kind = PipeScheduleKind::k1F1B;
  } else if (text == "zb-h1") {
    shape.kind = PipeScheduleKind::kZbH1;
  } else if (text == "interleaved") {
    require(false, "schedule", "--schedule interleaved needs the number of model chunks per rank",
            "write interleaved:V, e.g. --schedule interleaved:2");
  } else if (text.rfind(prefix, 0) == 0) {
    const std::string digits = text.substr(prefix.size());
    int v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    require(!digits.empty() && ec == std::errc() && end == digits.data() + digits.size(), "schedule",
            "'" + text + "' does not end in a whole number of model chunks", "write interleaved:V, e.g. interleaved:2");
    require(v >= 2, "schedule", "interleaved needs V >= 2 model chunks per rank, got " + digits,
            "use --schedule interleaved:2, or 1f1b for one chunk");
    shape.kind = PipeScheduleKind::kInterleaved;
    shape.chunks = v;
  } else {
    require(false, "schedule", "unknown schedule '" + text + "'", kScheduleForms);
  }
  shape.validate();
  return shape;
}

std::string schedule_name(const PipelineShape& shape) {
  switch (shape.kind) {
    case PipeScheduleKind::kAfab: return "afab";
    case PipeScheduleKind::k1F1B: return "1f1b";
    case PipeScheduleKind::kInterleaved: return "interleaved:" + str(shape.chunks);
    case PipeScheduleKind::kZbH1: return "zb-h1";
  }
  return "?";
}

std::string describe_action(const Action& a) {
  const char* what = "?";
  switch (a.kind) {
    case ActionKind::kForward: what = "forward"; break;
    case ActionKind::kBackward: what = "backward"; break;
    case ActionKind::kBackwardInput: what = "input backward"; break;
    case ActionKind::kBackwardWeight: what = "weight backward"; break;
    case ActionKind::kRecvActivation: what = "receive activation"; break;
    case ActionKind::kSendActivation: what = "send activation"; break;
    case ActionKind::kRecvGrad: what = "receive gradient"; break;
    case ActionKind::kSendGrad: what = "send gradient"; break;
  }
  return std::string(what) + " of micro-batch " + std::to_string(a.micro_batch) + " (chunk " + std::to_string(a.chunk) +
         ")";
}

int model_stage(const PipelineShape& shape, int rank, int chunk) { return chunk * shape.stages + rank; }

int action_peer(const PipelineShape& shape, int rank, const Action& action) {
  const int s = model_stage(shape, rank, action.chunk);
  int neighbour = 0;
  switch (action.kind) {
    case ActionKind::kRecvActivation:
    case ActionKind::kSendGrad: neighbour = s - 1; break;
    case ActionKind::kSendActivation:
    case ActionKind::kRecvGrad: neighbour = s + 1; break;
    default: SCALELAB_CHECK(false, "action_peer: a compute action has no peer");
  }
  SCALELAB_CHECK(neighbour >= 0 && neighbour < shape.model_stages(), "model stage ", s, " (rank ", rank, ", chunk ",
                 action.chunk, ") has no neighbour ", neighbour, " of ", shape.model_stages());
  return neighbour % shape.stages;
}

RankSchedule afab_order(int stages, int micro_batches, int rank) {
  (void)stages;
  (void)rank;
  RankSchedule order;
  for (int i = 0; i < micro_batches; ++i) order.push_back({ActionKind::kForward, i, 0});
  for (int i = 0; i < micro_batches; ++i) order.push_back({ActionKind::kBackward, i, 0});
  return order;
}

RankSchedule one_f_one_b_order(int stages, int micro_batches, int rank) {
  RankSchedule order;
  // LAB 05 BEGIN one_f_one_b_order: section 2
  // Warm-up: rank r runs ahead by the forwards that the p - r - 1 ranks after it need before the
  // first gradient can come back; fewer if there are not that many micro-batches.
  const int warmup = std::min(stages - rank - 1, micro_batches);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) order.push_back({ActionKind::kForward, next_forward, 0});
  // Steady state: one forward (the next micro-batch), then one backward (the oldest in flight),
  // so at most warmup + 1 micro-batches hold activations at once.
  for (; next_forward < micro_batches; ++next_forward, ++next_backward) {
    order.push_back({ActionKind::kForward, next_forward, 0});
    order.push_back({ActionKind::kBackward, next_backward, 0});
  }
  // Cool-down: no forwards left; the backwards of the warm-up micro-batches, oldest first.
  for (; next_backward < micro_batches; ++next_backward) order.push_back({ActionKind::kBackward, next_backward, 0});
  // LAB 05 END
  return order;
}

RankSchedule interleaved_order(int stages, int micro_batches, int chunks, int rank) {
  // Megatron's forward_backward_pipelining_with_interleaving: v * m virtual micro-batches k. In
  // groups of p * v, the first p run on chunk 0, the next p on chunk 1, ... (backwards from the
  // last chunk); the micro-batch is the group's first plus k % p.
  const int p = stages, v = chunks, total = v * micro_batches;
  const auto micro_batch = [&](int k) { return k / (p * v) * p + k % p; };
  const auto forward = [&](int k) { return Action{ActionKind::kForward, micro_batch(k), (k / p) % v}; };
  const auto backward = [&](int k) { return Action{ActionKind::kBackward, micro_batch(k), v - 1 - (k / p) % v}; };
  // Two forwards per later rank (one for the activation to travel down, one for the gradient to
  // travel back) plus a whole round of p for every chunk after the first.
  const int warmup = std::min((p - rank - 1) * 2 + (v - 1) * p, total);
  RankSchedule order;
  for (int k = 0; k < warmup; ++k) order.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    order.push_back(forward(warmup + k));
    order.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(backward(k));
  return order;
}

RankSchedule zb_h1_order(int stages, int micro_batches, int rank) {
  // 1F1B's order with each backward split into B (input gradient, sent on at once) and W (weight
  // gradient, needed only by the optimizer step). A W waits until a forward would otherwise put
  // more than min(p, m) micro-batches in flight (1F1B's peak on rank 0), so the later ranks fill
  // the idle time of their cool-down with W's instead of waiting.
  const int limit = std::min(stages, micro_batches);
  const RankSchedule one_f_one_b = one_f_one_b_order(stages, micro_batches, rank);
  RankSchedule order;
  std::deque<int> pending_w;  // micro-batches whose B ran and whose W has not, oldest first
  int in_flight = 0;          // forward ran, W not yet
  int forwards_left = micro_batches;
  const auto run_w = [&] {
    order.push_back({ActionKind::kBackwardWeight, pending_w.front(), 0});
    pending_w.pop_front();
    --in_flight;
  };
  for (const Action& a : one_f_one_b) {
    if (a.kind == ActionKind::kForward) {
      if (in_flight == limit) {
        SCALELAB_CHECK(!pending_w.empty(), "zb-h1 rank ", rank, ": ", limit, " in flight and no W to run");
        run_w();
      }
      order.push_back(a);
      ++in_flight;
      --forwards_left;
    } else {
      order.push_back({ActionKind::kBackwardInput, a.micro_batch, 0});
      pending_w.push_back(a.micro_batch);
      if (forwards_left == 0) run_w();  // cool-down: one W after each B
    }
  }
  while (!pending_w.empty()) run_w();
  return order;
}

RankSchedule compute_order(const PipelineShape& shape, int rank) {
  shape.validate();
  SCALELAB_CHECK(rank >= 0 && rank < shape.stages, "rank ", rank, " is not in 0..", shape.stages - 1);
  switch (shape.kind) {
    case PipeScheduleKind::kAfab: return afab_order(shape.stages, shape.micro_batches, rank);
    case PipeScheduleKind::k1F1B: return one_f_one_b_order(shape.stages, shape.micro_batches, rank);
    case PipeScheduleKind::kInterleaved:
      return interleaved_order(shape.stages, shape.micro_batches, shape.chunks, rank);
    case PipeScheduleKind::kZbH1: return zb_h1_order(shape.stages, shape.micro_batches, rank);
  }
  return {};
}

RankSchedule with_communication(const PipelineShape& shape, int rank, const RankSchedule& compute) {
  const int last_stage = shape.model_stages() - 1;
  RankSchedule out;
  for (const Action& a : compute) {
    const int s = model_stage(shape, rank, a.chunk);
    const bool has_previous = s > 0, has_next = s < last_stage;
    switch (a.kind) {
      case ActionKind::kForward:
        if (has_previous) out.push_back({ActionKind::kRecvActivation, a.micro_batch, a.chunk});
        out.push_back(a);
        if (has_next) out.push_back({ActionKind::kSendActivation, a.micro_batch, a.chunk});
        break;
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput:
        if (has_next) out.push_back({ActionKind::kRecvGrad, a.micro_batch, a.chunk});
        out.push_back(a);
        if (has_previous) out.push_back({ActionKind::kSendGrad, a.micro_batch, a.chunk});
        break;
      case ActionKind::kBackwardWeight: out.push_back(a); break;  // local: nobody waits for it
      default: SCALELAB_CHECK(false, "with_communication: expected compute actions only");
    }
  }
  return out;
}

RankSchedule build_schedule(const PipelineShape& shape, int rank) {
  return with_communication(shape, rank, compute_order(shape, rank));
}

std::vector<RankSchedule> build_schedules(const PipelineShape& shape) {
  std::vector<RankSchedule> all;
  for (int r = 0; r < shape.stages; ++r) all.push_back(build_schedule(shape, r));
  return all;
}

int warmup_forwards(const RankSchedule& schedule) {
  int forwards = 0;
  for (const Action& a : schedule) {
    if (is_backward(a.kind)) break;
    if (a.kind == ActionKind::kForward) ++forwards;
  }
  return forwards;
}

int peak_in_flight(const RankSchedule& schedule) {
  int now = 0, peak = 0;
  for (const Action& a : schedule) {
    if (a.kind == ActionKind::kForward) peak = std::max(peak, ++now);
    if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) --now;
  }
  return peak;
}

int warmup_forwards_formula(const PipelineShape& shape, int rank) {
  const int p = shape.stages, m = shape.micro_batches, v = shape.chunks;
  const auto with_steady_forward = [](int warmup, int forwards) { return warmup < forwards ? warmup + 1 : warmup; };
  switch (shape.kind) {
    case PipeScheduleKind::kAfab: return m;
    case PipeScheduleKind::k1F1B:
    case PipeScheduleKind::kZbH1: return with_steady_forward(std::min(p - rank - 1, m), m);
    case PipeScheduleKind::kInterleaved:
      return with_steady_forward(std::min((p - rank - 1) * 2 + (v - 1) * p, v * m), v * m);
  }
  return 0;
}

int peak_in_flight_formula(const PipelineShape& shape, int rank) {
  const int p = shape.stages, m = shape.micro_batches, v = shape.chunks;
  switch (shape.kind) {
    case PipeScheduleKind::kAfab: return m;
    case PipeScheduleKind::k1F1B: return std::min(p - rank, m);
    case PipeScheduleKind::kInterleaved: return std::min((p - rank - 1) * 2 + (v - 1) * p + 1, v * m);
    case PipeScheduleKind::kZbH1: return std::min(p, m);
  }
  return 0;
}

}  // namespace scalelab
