// Stage 05: the pipeline schedules as data. For every schedule, p = 1..4 ranks and m = 1..8
// micro-batches (interleaved: m a multiple of p, v = 2..3 chunks): each (micro-batch, chunk) runs
// forward and backward once and in order, the warm-up and the peak in flight are the formulas,
// the messages pair up, the simulation completes, and its bubble is the formula's. Wrong
// schedules written by hand are caught.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "schedule/pipeline_schedule.hpp"
#include "schedule/pipeline_sim.hpp"
#include "schedule/rendezvous.hpp"

using namespace scalelab;

namespace {

PipelineShape make_shape(PipeScheduleKind kind, int p, int m, int v = 1) {
  PipelineShape s;
  s.kind = kind;
  s.stages = p;
  s.micro_batches = m;
  s.chunks = v;
  return s;
}

// Every shape the tests sweep.
std::vector<PipelineShape> all_shapes() {
  std::vector<PipelineShape> out;
  for (PipeScheduleKind kind : {PipeScheduleKind::kAfab, PipeScheduleKind::k1F1B, PipeScheduleKind::kZbH1})
    for (int p = 1; p <= 4; ++p)
      for (int m = 1; m <= 8; ++m) out.push_back(make_shape(kind, p, m));
  for (int v = 2; v <= 3; ++v)
    for (int p = 1; p <= 4; ++p)
      for (int m = p; m <= 8; m += p) out.push_back(make_shape(PipeScheduleKind::kInterleaved, p, m, v));
  return out;
}

std::string label(const PipelineShape& s) {
  return schedule_name(s) + " p=" + std::to_string(s.stages) + " m=" + std::to_string(s.micro_batches);
}

// The warm-up phase of the docs (DESIGN.md, Megatron): 1f1b and zb-h1 min(p - r - 1, m);
// interleaved min((p - r - 1) * 2 + (v - 1) * p, v * m); afab all m.
int doc_warmup(const PipelineShape& s, int r) {
  const int p = s.stages, m = s.micro_batches, v = s.chunks;
  switch (s.kind) {
    case PipeScheduleKind::kAfab: return m;
    case PipeScheduleKind::kInterleaved: return std::min((p - r - 1) * 2 + (v - 1) * p, v * m);
    default: return std::min(p - r - 1, m);
  }
}

// Peak (micro-batch, chunk) pairs holding activations: afab m; 1f1b min(p - r, m) (warm-up + 1);
// interleaved warm-up + 1, at most v * m; zb-h1 min(p, m) on every rank.
int doc_peak(const PipelineShape& s, int r) {
  const int p = s.stages, m = s.micro_batches, v = s.chunks;
  switch (s.kind) {
    case PipeScheduleKind::kAfab: return m;
    case PipeScheduleKind::k1F1B: return std::min(p - r, m);
    case PipeScheduleKind::kInterleaved: return std::min(doc_warmup(s, r) + 1, v * m);
    case PipeScheduleKind::kZbH1: return std::min(p, m);
  }
  return -1;
}

std::string show(const RankSchedule& list) {
  std::string out;
  for (const Action& a : list) out += describe_action(a) + "; ";
  return out;
}

std::string expect_config_error(const std::string& text, int p, int m) {
  try {
    parse_pipeline_schedule(text, p, m);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("parse_pipeline_schedule(\"" << text << "\", " << p << ", " << m << ") did not throw a ConfigError");
  return "";
}

std::string expect_error(const PipelineShape& shape, const std::vector<RankSchedule>& lists) {
  try {
    simulate_pipeline(shape, lists, ActionCosts{});
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("the simulation of a wrong " << label(shape) << " schedule completed without an error");
  return "";
}

// A list's compute actions, in order.
RankSchedule compute_only(const RankSchedule& list) {
  RankSchedule out;
  for (const Action& a : list)
    if (is_compute(a.kind)) out.push_back(a);
  return out;
}

// The same for the rendezvous check (NCCL's rules): its error, or a failure if it passed.
std::string expect_rendezvous_error(const PipelineShape& shape, const std::vector<RankSchedule>& lists) {
  try {
    check_rendezvous(shape, lists);
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("the rendezvous check of " << label(shape) << " passed");
  return "";
}

// 1f1b's compute order on every rank (to be edited by a test), and the lists with messages.
std::vector<RankSchedule> one_f_one_b_compute(const PipelineShape& s) {
  std::vector<RankSchedule> compute;
  for (int r = 0; r < s.stages; ++r) compute.push_back(one_f_one_b_order(s.stages, s.micro_batches, r));
  return compute;
}
std::vector<RankSchedule> with_messages(const PipelineShape& s, const std::vector<RankSchedule>& compute) {
  std::vector<RankSchedule> lists;
  for (int r = 0; r < s.stages; ++r) lists.push_back(with_communication(s, r, compute[r]));
  return lists;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("every (micro-batch, chunk) runs forward once, then backward once (zb-h1: B, then W)", "[pipeline]") {
  for (const PipelineShape& s : all_shapes()) {
    const bool split = s.kind == PipeScheduleKind::kZbH1;
    for (int r = 0; r < s.stages; ++r) {
      const RankSchedule list = compute_order(s, r);
      INFO(label(s) << " rank " << r << ": " << show(list));
      CHECK(list.size() == static_cast<std::size_t>(s.micro_batches * s.chunks * (split ? 3 : 2)));
      // position of each action kind, per (micro-batch, chunk); -1: not seen
      std::map<std::tuple<ActionKind, int, int>, int> where;
      for (int i = 0; i < static_cast<int>(list.size()); ++i) {
        const Action& a = list[i];
        INFO("action " << i << " (micro-batch " << a.micro_batch << ", chunk " << a.chunk << ")");
        CHECK((a.micro_batch >= 0 && a.micro_batch < s.micro_batches && a.chunk >= 0 && a.chunk < s.chunks));
        CHECK(where.emplace(std::make_tuple(a.kind, a.micro_batch, a.chunk), i).second);  // no repeats
        if (split) CHECK(a.kind != ActionKind::kBackward);
        if (!split) CHECK((a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward));
      }
      const ActionKind backward = split ? ActionKind::kBackwardInput : ActionKind::kBackward;
      for (int mb = 0; mb < s.micro_batches; ++mb)
        for (int c = 0; c < s.chunks; ++c) {
          INFO("micro-batch " << mb << ", chunk " << c);
          const auto f = where.find({ActionKind::kForward, mb, c}), b = where.find({backward, mb, c});
          REQUIRE(f != where.end());
          REQUIRE(b != where.end());
          CHECK(f->second < b->second);
          if (split) {
            const auto w = where.find({ActionKind::kBackwardWeight, mb, c});
            REQUIRE(w != where.end());
            CHECK(b->second < w->second);
          }
        }
      // On each chunk, forwards, backwards (and W's) run in micro-batch order: oldest first.
      std::map<std::pair<ActionKind, int>, int> last;  // (kind, chunk) -> last micro-batch seen
      for (const Action& a : list) {
        auto [it, first] = last.try_emplace({a.kind, a.chunk}, -1);
        (void)first;
        INFO(describe_action(a) << " after micro-batch " << it->second << " of its kind on chunk " << a.chunk);
        CHECK(a.micro_batch == it->second + 1);
        it->second = a.micro_batch;
      }
    }
  }
}

TEST_CASE("forwards before the first backward: the warm-up, plus the steady state's first forward",
          "[pipeline][graded][pipeline_warmup]") {
  // warmup_forwards counts the forwards before the first backward: the warm-up phase w and, where
  // a steady state follows (w < the number of forwards), its first forward too.
  for (const PipelineShape& s : all_shapes())
    for (int r = 0; r < s.stages; ++r) {
      const int forwards = s.micro_batches * s.chunks, w = doc_warmup(s, r);
      const int expected = s.kind == PipeScheduleKind::kAfab ? forwards : (w < forwards ? w + 1 : w);
      const RankSchedule list = compute_order(s, r);
      INFO(label(s) << " rank " << r << ": " << show(list));
      CHECK(warmup_forwards(list) == expected);
      CHECK(warmup_forwards_formula(s, r) == expected);
      CHECK(warmup_forwards(build_schedule(s, r)) == expected);  // messages do not change it
      // After the warm-up phase, 1F1B-style schedules never run two forwards in a row.
      if (s.kind == PipeScheduleKind::kAfab) continue;
      int seen_forwards = 0;
      for (std::size_t i = 0; i + 1 < list.size(); ++i) {
        if (list[i].kind == ActionKind::kForward) ++seen_forwards;
        if (seen_forwards > w && list[i].kind == ActionKind::kForward) {
          INFO("action " << i << " is a forward after the warm-up of " << w);
          CHECK(list[i + 1].kind != ActionKind::kForward);
        }
      }
    }
}

TEST_CASE("peak micro-batches in flight equal the formulas on every rank", "[pipeline][graded][pipeline_in_flight]") {
  for (const PipelineShape& s : all_shapes())
    for (int r = 0; r < s.stages; ++r) {
      const RankSchedule list = compute_order(s, r);
      INFO(label(s) << " rank " << r << ": " << show(list));
      CHECK(peak_in_flight(list) == doc_peak(s, r));
      CHECK(peak_in_flight_formula(s, r) == doc_peak(s, r));
    }
  // zb-h1 holds no more than 1F1B's rank 0, however late its W's run.
  for (int p = 2; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m)
      for (int r = 0; r < p; ++r) {
        INFO("p=" << p << " m=" << m << " rank " << r);
        CHECK(peak_in_flight(zb_h1_order(p, m, r)) <= peak_in_flight(one_f_one_b_order(p, m, 0)));
      }
}

TEST_CASE("every send has its receive, in the same order, on the neighbouring model stage", "[pipeline]") {
  for (const PipelineShape& s : all_shapes()) {
    INFO(label(s));
    const std::vector<RankSchedule> lists = build_schedules(s);
    // (from rank, to rank, activation?) -> the (micro-batch, receiving model stage) sequence
    std::map<std::tuple<int, int, bool>, std::vector<std::pair<int, int>>> sent, received;
    int activation_sends = 0, grad_sends = 0;
    for (int r = 0; r < s.stages; ++r)
      for (std::size_t i = 0; i < lists[r].size(); ++i) {
        const Action& a = lists[r][i];
        const int stage = a.chunk * s.stages + r;
        switch (a.kind) {
          case ActionKind::kSendActivation:
            ++activation_sends;
            sent[{r, (stage + 1) % s.stages, true}].push_back({a.micro_batch, stage + 1});
            CHECK(action_peer(s, r, a) == (stage + 1) % s.stages);
            break;
          case ActionKind::kSendGrad:
            ++grad_sends;
            sent[{r, (stage - 1) % s.stages, false}].push_back({a.micro_batch, stage - 1});
            CHECK(action_peer(s, r, a) == (stage - 1) % s.stages);
            break;
          case ActionKind::kRecvActivation:
            received[{(stage - 1) % s.stages, r, true}].push_back({a.micro_batch, stage});
            break;
          case ActionKind::kRecvGrad:
            received[{(stage + 1) % s.stages, r, false}].push_back({a.micro_batch, stage});
            break;
          default: break;
        }
        // A receive comes right before the compute action that uses it, a send right after the
        // one that made it: a forward for activations, a backward (zb-h1: B) for gradients.
        const bool is_receive = a.kind == ActionKind::kRecvActivation || a.kind == ActionKind::kRecvGrad;
        const bool is_send = a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kSendGrad;
        if (!is_receive && !is_send) continue;
        INFO("rank " << r << " action " << i << ": " << show(lists[r]));
        REQUIRE((is_receive ? i + 1 < lists[r].size() : i > 0));
        const Action& user = lists[r][is_receive ? i + 1 : i - 1];
        CHECK(user.micro_batch == a.micro_batch);
        CHECK(user.chunk == a.chunk);
        if (a.kind == ActionKind::kRecvActivation || a.kind == ActionKind::kSendActivation)
          CHECK(user.kind == ActionKind::kForward);
        else
          CHECK((user.kind == ActionKind::kBackward || user.kind == ActionKind::kBackwardInput));
      }
    // Each of the S - 1 boundaries carries m activations forward and m gradients back.
    const int boundaries = s.model_stages() - 1;
    CHECK(activation_sends == boundaries * s.micro_batches);
    CHECK(grad_sends == boundaries * s.micro_batches);
    CHECK(sent == received);
  }
}

TEST_CASE("the simulation completes and its bubble is the formula's, exactly", "[pipeline][graded][pipeline_bubble]") {
  // Bubble = idle / (p * makespan), the (p - 1) / (m + p - 1) convention. With equal costs on
  // every stage afab and 1f1b take (m + p - 1)(F + B + W) for any m (for m < p too: the single
  // micro-batch chain of p forwards and p backwards, then one more F + B + W per further
  // micro-batch), interleaved (v m + p - 1) per-chunk units, zb-h1 (m >= p, W <= F)
  // m (F + B + W) + (p - 1)(F + B - W).
  const ActionCosts cost_sets[] = {{1, 1, 1, 0}, {1, 1.5, 0.5, 0}, {2, 1, 1, 0}, {0.5, 2, 0.25, 0}};
  for (const ActionCosts& c : cost_sets)
    for (const PipelineShape& s : all_shapes()) {
      INFO(label(s) << " F=" << c.forward << " B=" << c.backward_input << " W=" << c.backward_weight);
      const PipelineTimeline t = simulate_pipeline(s, build_schedules(s), c);
      const double p = s.stages, m = s.micro_batches, v = s.chunks;
      const double f = c.forward, b = c.backward_input, w = c.backward_weight;
      CHECK(t.busy == Approx(p * m * v * (f + b + w)).epsilon(1e-12));
      double makespan = 0;
      switch (s.kind) {
        case PipeScheduleKind::kAfab:
        case PipeScheduleKind::k1F1B: makespan = (m + p - 1) * (f + b + w); break;
        case PipeScheduleKind::kInterleaved: makespan = (v * m + p - 1) * (f + b + w); break;
        case PipeScheduleKind::kZbH1:
          // m < p: rank 0's last W follows its last B with nothing left to hide behind.
          makespan = m >= p ? m * (f + b + w) + (p - 1) * (f + b - w) : (m + p - 1) * (f + b) + w;
          break;
      }
      CHECK(t.makespan == Approx(makespan).epsilon(1e-12));
      const double expected = 1 - p * m * v * (f + b + w) / (p * makespan);
      CHECK(t.bubble_fraction == Approx(expected).margin(1e-12));
      CHECK(bubble_fraction(t.ranks) == Approx(t.bubble_fraction).margin(1e-12));
      if (s.kind != PipeScheduleKind::kZbH1 || s.micro_batches >= s.stages)
        CHECK(bubble_fraction_formula(s, c) == Approx(t.bubble_fraction).margin(1e-12));
    }
}

TEST_CASE("zb-h1's bubble is at most 1f1b's, and below it wherever there is a bubble", "[pipeline]") {
  // Including W > F, where the formula no longer holds (a W run before a forward delays it).
  const ActionCosts cost_sets[] = {{1, 1, 1, 0}, {1, 2, 1, 0}, {1, 1, 2, 0}, {0.5, 1, 1, 0}, {1, 1, 1, 0.3}};
  for (const ActionCosts& c : cost_sets)
    for (int p = 1; p <= 4; ++p)
      for (int m = 1; m <= 8; ++m) {
        const PipelineShape zb = make_shape(PipeScheduleKind::kZbH1, p, m);
        const PipelineShape fb = make_shape(PipeScheduleKind::k1F1B, p, m);
        const double zb_bubble = simulate_pipeline(zb, build_schedules(zb), c).bubble_fraction;
        const double fb_bubble = simulate_pipeline(fb, build_schedules(fb), c).bubble_fraction;
        INFO("p=" << p << " m=" << m << " F=" << c.forward << " B=" << c.backward_input << " W=" << c.backward_weight
                  << " transfer=" << c.transfer << ": zb-h1 " << zb_bubble << ", 1f1b " << fb_bubble);
        CHECK(zb_bubble <= fb_bubble + 1e-12);
        if (p > 1) CHECK(zb_bubble < fb_bubble);
      }
}

TEST_CASE("a transfer time delays every boundary crossing", "[pipeline]") {
  // afab: the forwards reach the last rank (p - 1) transfers late and the gradients come back
  // (p - 1) transfers late: (m + p - 1)(F + B + W) + 2 (p - 1) t.
  const ActionCosts c{1, 1, 1, 0.5};
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m) {
      const PipelineShape s = make_shape(PipeScheduleKind::kAfab, p, m);
      const PipelineTimeline t = simulate_pipeline(s, build_schedules(s), c);
      INFO("p=" << p << " m=" << m);
      CHECK(t.makespan == Approx((m + p - 1) * 3.0 + 2 * (p - 1) * 0.5).epsilon(1e-12));
    }
}

TEST_CASE("bubble_fraction works on measured times, compute actions only", "[pipeline]") {
  // Rank 0 computes [0, 2], rank 1 [1, 3]: the span is 3, busy 4 of 2 x 3. Messages do not count.
  const std::vector<std::vector<TimedAction>> ranks = {
      {{{ActionKind::kForward, 0, 0}, 0, 2}, {{ActionKind::kSendActivation, 0, 0}, 2, 2}},
      {{{ActionKind::kRecvActivation, 0, 0}, 0, 1}, {{ActionKind::kForward, 0, 0}, 1, 3}},
  };
  CHECK(bubble_fraction(ranks) == Approx(1.0 / 3).margin(1e-15));
  CHECK(bubble_fraction({}) == 0);
}

TEST_CASE("the Gantt chart draws each rank's actions and its bubble", "[pipeline]") {
  // 1f1b, p = 2, m = 2, F = 1, a whole backward 2: rank 0 runs F0 [0,1] F1 [1,2], waits for the
  // gradient of micro-batch 0 until 4, B0 [4,6], waits, B1 [7,9]; rank 1 F0 [1,2] B0 [2,4]
  // F1 [4,5] B1 [5,7]. One column per time unit.
  const PipelineShape s = make_shape(PipeScheduleKind::k1F1B, 2, 2);
  const PipelineTimeline t = simulate_pipeline(s, build_schedules(s), ActionCosts{1, 1, 1, 0});
  const std::string chart = gantt_chart(s, t, 9);
  INFO(chart);
  CHECK(contains(chart, "rank 0 |FF..B0.B1|\n"));
  CHECK(contains(chart, "rank 1 |.FB0FB1..|\n"));
  CHECK(contains(chart, "simulated 0.333333"));
  CHECK(contains(chart, "(p-1)/(m+p-1) = 0.333333"));
  // Twice the width: every action twice as wide.
  CHECK(contains(gantt_chart(s, t, 18), "rank 0 |F0F1....B000..B111|\n"));
}

TEST_CASE("schedule texts parse, and bad ones name --schedule and the accepted forms", "[pipeline]") {
  CHECK(parse_pipeline_schedule("gpipe", 4, 8).kind == PipeScheduleKind::kAfab);
  CHECK(parse_pipeline_schedule("afab", 4, 8).kind == PipeScheduleKind::kAfab);
  CHECK(parse_pipeline_schedule("1f1b", 4, 3).kind == PipeScheduleKind::k1F1B);
  CHECK(parse_pipeline_schedule("zb-h1", 4, 3).kind == PipeScheduleKind::kZbH1);
  const PipelineShape i3 = parse_pipeline_schedule("interleaved:3", 2, 4);
  CHECK(i3.kind == PipeScheduleKind::kInterleaved);
  CHECK(i3.chunks == 3);
  CHECK(i3.model_stages() == 6);
  for (const char* name : {"afab", "1f1b", "interleaved:2", "zb-h1"})
    CHECK(schedule_name(parse_pipeline_schedule(name, 2, 4)) == name);
  CHECK(schedule_name(parse_pipeline_schedule("gpipe", 2, 4)) == "afab");

  const std::string unknown = expect_config_error("pipedream", 4, 8);
  INFO(unknown);
  CHECK(contains(unknown, "schedule: unknown schedule 'pipedream'"));
  for (const char* form : {"--schedule", "afab", "gpipe", "1f1b", "interleaved:V", "zb-h1"})
    CHECK(contains(unknown, form));
  CHECK(contains(expect_config_error("interleaved", 4, 8), "write interleaved:V, e.g. --schedule interleaved:2"));
  CHECK(contains(expect_config_error("interleaved:1", 4, 8), "interleaved needs V >= 2 model chunks per rank, got 1"));
  CHECK(contains(expect_config_error("interleaved:0", 4, 8), "V >= 2"));
  CHECK(contains(expect_config_error("interleaved:x", 4, 8), "does not end in a whole number"));
  CHECK(contains(expect_config_error("interleaved:2x", 4, 8), "does not end in a whole number"));
  CHECK(contains(expect_config_error("1F1B", 4, 8), "unknown schedule '1F1B'"));
  const std::string partial = expect_config_error("interleaved:2", 4, 6);
  CHECK(contains(partial, "micro_batches: interleaved needs --micro-batches to be a multiple of --pp 4, got 6"));
  CHECK(contains(partial, "use --micro-batches 8 or 4"));
  CHECK(contains(expect_config_error("interleaved:2", 4, 3), "use --micro-batches 4"));
  CHECK(contains(expect_config_error("1f1b", 0, 8), "pp: must be at least 1, got 0"));
  CHECK(contains(expect_config_error("1f1b", 4, 0), "micro_batches: must be at least 1, got 0"));
  PipelineShape chunks_without_interleaving = make_shape(PipeScheduleKind::k1F1B, 2, 4, 2);
  CHECK_THROWS_WITH(chunks_without_interleaving.validate(), Catch::Contains("only interleaved:V has several"));
}

TEST_CASE("wrong schedules are caught: a short warm-up, a deadlock, messages out of order", "[pipeline]") {
  const PipelineShape s = make_shape(PipeScheduleKind::k1F1B, 4, 8);
  SECTION("1f1b with one warm-up forward too few on rank 0 runs, but the checks see it") {
    // Rank 0 warms up with 2 forwards instead of 3: no deadlock (sends never block), but the
    // count is off and rank 0 now waits for every gradient: the bubble grows past the formula.
    std::vector<RankSchedule> compute = one_f_one_b_compute(s);
    RankSchedule& r0 = compute[0];
    RankSchedule short_warmup;
    for (int i = 0; i < 2; ++i) short_warmup.push_back({ActionKind::kForward, i, 0});
    for (int i = 2; i < 8; ++i) {
      short_warmup.push_back({ActionKind::kForward, i, 0});
      short_warmup.push_back({ActionKind::kBackward, i - 2, 0});
    }
    for (int i = 6; i < 8; ++i) short_warmup.push_back({ActionKind::kBackward, i, 0});
    r0 = short_warmup;
    CHECK(warmup_forwards(r0) != warmup_forwards_formula(s, 0));
    CHECK(peak_in_flight(r0) != peak_in_flight_formula(s, 0));
    const std::vector<RankSchedule> lists = with_messages(s, compute);
    const PipelineTimeline t = simulate_pipeline(s, lists, ActionCosts{});
    INFO(gantt_chart(s, t, 66));
    CHECK(t.bubble_fraction > bubble_fraction_formula(s, ActionCosts{}) + 0.01);
  }
  SECTION("a backward before its forward deadlocks, and the error names both blocked ranks") {
    std::vector<RankSchedule> lists = build_schedules(s);
    RankSchedule& r0 = lists[0];
    r0.insert(r0.begin(), {{ActionKind::kRecvGrad, 0, 0}, {ActionKind::kBackward, 0, 0}});
    r0.erase(std::find(r0.begin() + 2, r0.end(), Action{ActionKind::kRecvGrad, 0, 0}));
    r0.erase(std::find(r0.begin() + 2, r0.end(), Action{ActionKind::kBackward, 0, 0}));
    const std::string msg = expect_error(s, lists);
    INFO(msg);
    CHECK(contains(msg, "deadlocks"));
    CHECK(contains(msg, "rank 0 waits at action 0, receive gradient of micro-batch 0 (chunk 0) from rank 1"));
    CHECK(contains(msg, "rank 1 waits at action 0, receive activation of micro-batch 0 (chunk 0) from rank 0"));
  }
  SECTION("two backwards swapped on one rank: the gradients arrive in another order") {
    std::vector<RankSchedule> compute = one_f_one_b_compute(s);
    auto b6 = std::find(compute[1].begin(), compute[1].end(), Action{ActionKind::kBackward, 6, 0});
    auto b7 = std::find(compute[1].begin(), compute[1].end(), Action{ActionKind::kBackward, 7, 0});
    std::iter_swap(b6, b7);
    const std::string msg = expect_error(s, with_messages(s, compute));
    INFO(msg);
    CHECK(contains(msg, "rank 1's receive gradient of micro-batch 7 (chunk 0)"));
    CHECK(contains(msg, "which is for micro-batch 6"));
    CHECK(contains(msg, "different orders"));
  }
  SECTION("a send nobody receives is reported") {
    std::vector<RankSchedule> lists = build_schedules(s);
    lists[3].erase(std::find(lists[3].begin(), lists[3].end(), Action{ActionKind::kRecvActivation, 7, 0}));
    const std::string msg = expect_error(s, lists);
    INFO(msg);
    CHECK(contains(msg, "rank 2's send activation of micro-batch 7 (chunk 0) to rank 3 is never received"));
  }
}

TEST_CASE("over NCCL (untagged, rendezvous sends): afab, 1f1b, zb-h1 run as built, interleaved with sends delayed",
          "[pipeline][rendezvous]") {
  // The executor's groups over NCCL (schedule/rendezvous.hpp): the sends queued since the last
  // receive go with it, and the host waits for the whole group. Every list the builders give for
  // afab, 1f1b and zb-h1 completes that way, and interleaved's with m = p; with m > p interleaved's
  // warm-up sends activations round the ring ahead of the receives that take them, and two ranks
  // end up each in a send whose receive the other posts only later. rendezvous_schedules delays
  // those sends: its lists run under both rules, with every rank's compute order (so its memory)
  // and the bubble unchanged. (p = 1 trains without a pipeline.)
  for (const PipelineShape& s : all_shapes()) {
    if (s.stages == 1) continue;
    INFO(label(s));
    const std::vector<RankSchedule> built = build_schedules(s);
    const bool as_built = s.kind != PipeScheduleKind::kInterleaved || s.micro_batches == s.stages;
    if (as_built) {
      CHECK_NOTHROW(check_rendezvous(s, built));
    } else {
      const std::string msg = expect_rendezvous_error(s, built);
      INFO(msg);
      CHECK(contains(msg, "deadlocks over an untagged backend"));
    }
    const std::vector<RankSchedule> repaired = rendezvous_schedules(s);
    CHECK_NOTHROW(check_rendezvous(s, repaired));
    CHECK((repaired == built) == as_built);  // only what needs it is changed
    for (int r = 0; r < s.stages; ++r) {
      INFO("rank " << r);
      CHECK(compute_only(repaired[r]) == compute_only(built[r]));
      CHECK(repaired[r].size() == built[r].size());
    }
    const ActionCosts costs{1, 2, 1, 0};
    CHECK(simulate_pipeline(s, repaired, costs).bubble_fraction ==
          Approx(simulate_pipeline(s, built, costs).bubble_fraction).margin(1e-12));
  }
}

TEST_CASE("the rendezvous check counts the groups, names a cycle, and catches messages NCCL would mix up",
          "[pipeline][rendezvous]") {
  SECTION("1f1b, p = 2, m = 1: rank 0 posts one group (send, receive), rank 1 two (receive; send)") {
    const PipelineShape s = make_shape(PipeScheduleKind::k1F1B, 2, 1);
    CHECK(check_rendezvous(s, build_schedules(s)) == 3);
  }
  SECTION("interleaved:2, p = 2, m = 4: each rank waits on a send the other receives later; delayed, both run") {
    const PipelineShape s = make_shape(PipeScheduleKind::kInterleaved, 2, 4, 2);
    const std::string msg = expect_rendezvous_error(s, build_schedules(s));
    // The repair moves rank 0's send of micro-batch 3's activations past the receive of
    // micro-batch 1's gradient, into the group of the next receive (and likewise on rank 1).
    const std::vector<RankSchedule> repaired = rendezvous_schedules(s);
    const auto position = [](const RankSchedule& list, Action a) {
      return std::find(list.begin(), list.end(), a) - list.begin();
    };
    const Action send{ActionKind::kSendActivation, 3, 0}, receive{ActionKind::kRecvGrad, 1, 1};
    CHECK(position(build_schedules(s)[0], send) < position(build_schedules(s)[0], receive));
    CHECK(position(repaired[0], send) > position(repaired[0], receive));
    INFO(msg);
    CHECK(contains(msg,
                   "rank 0 waits in its group 3: send gradient of micro-batch 0 (chunk 1) to rank 1 (done), send "
                   "activation of micro-batch 3 (chunk 0) to rank 1"));
    CHECK(contains(msg, "rank 1 waits in its group 5: send activation of micro-batch 2 (chunk 0) to rank 0"));
  }
  SECTION("a gradient sent before an activation between the same two ranks: MPI's tags tell them apart, NCCL not") {
    // interleaved:2 with p = 2 carries activations and gradients from rank 0 to rank 1. Rank 0
    // sends two of them in the other order: over MPI each still meets its receive by tag (the
    // simulator matches activations and gradients apart); over NCCL the k-th send meets the k-th
    // receive, and a gradient would land in the buffer of an activation.
    const PipelineShape s = make_shape(PipeScheduleKind::kInterleaved, 2, 2, 2);
    std::vector<RankSchedule> lists = build_schedules(s);
    RankSchedule& r0 = lists[0];
    const auto activation = std::find(r0.begin(), r0.end(), Action{ActionKind::kSendActivation, 1, 1});
    const auto gradient = std::find(r0.begin(), r0.end(), Action{ActionKind::kSendGrad, 0, 1});
    REQUIRE(activation < gradient);
    REQUIRE(gradient != r0.end());
    std::iter_swap(activation, gradient);
    simulate_pipeline(s, lists, ActionCosts{});  // still fine under MPI's rules
    const std::string msg = expect_rendezvous_error(s, lists);
    INFO(msg);
    CHECK(contains(msg, "over an untagged backend (NCCL): rank 0's message"));
    CHECK(contains(msg, "but rank 1's receive"));
  }
}
