// Stage 05: the schedule's messages run with untagged rendezvous sends, as over NCCL (see
// rendezvous.hpp).
#include "schedule/rendezvous.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "core/error.hpp"

namespace scalelab {

namespace {

bool is_send(ActionKind k) { return k == ActionKind::kSendActivation || k == ActionKind::kSendGrad; }
bool is_message(ActionKind k) { return is_send(k) || k == ActionKind::kRecvActivation || k == ActionKind::kRecvGrad; }

// One send or receive as posted: where it is in the rank's groups, and its partner on the peer.
struct Op {
  Action action;
  int peer = 0;
  int group = 0;
  std::size_t index = 0;  // in the rank's list
  int partner = -1;       // index into the peer's ops
  bool done = false;
};

// The message an action carries, as both ends name it: micro-batch, the model stage it goes to,
// activation or gradient.
struct Carried {
  int micro_batch, to_stage;
  bool activation;
  bool operator==(const Carried&) const = default;
};

Carried carried(const PipelineShape& shape, int rank, const Action& a) {
  const int s = model_stage(shape, rank, a.chunk);
  switch (a.kind) {
    case ActionKind::kSendActivation: return {a.micro_batch, s + 1, true};
    case ActionKind::kSendGrad: return {a.micro_batch, s - 1, false};
    case ActionKind::kRecvActivation: return {a.micro_batch, s, true};
    default: return {a.micro_batch, s, false};  // kRecvGrad
  }
}

std::string describe_group(const std::vector<Op>& ops, int group) {
  std::string s;
  for (const Op& op : ops)
    if (op.group == group)
      s += std::string(s.empty() ? "" : ", ") + describe_action(op.action) +
           (is_send(op.action.kind) ? " to" : " from") + " rank " + std::to_string(op.peer) +
           (op.done ? " (done)" : "");
  return s;
}

// The lists replayed under NCCL's rules: the number of groups, or (error set) where they stopped,
// with the sends that hold a stuck group while their receive waits in a later group of the peer.
struct Replay {
  int groups = 0;
  std::string error;
  std::vector<std::vector<std::size_t>> stuck_sends;  // per rank: list indices
  std::vector<std::vector<std::size_t>> closing;      // per rank: list index of each group's receive
};

Replay replay(const PipelineShape& shape, const std::vector<RankSchedule>& schedules) {
  const int p = shape.stages;
  SCALELAB_CHECK(static_cast<int>(schedules.size()) == p, "check_rendezvous: ", schedules.size(), " action lists for ",
                 p, " ranks");
  Replay out;
  out.stuck_sends.resize(p);
  out.closing.resize(p);
  // Each rank's operations, grouped as the executor posts them over NCCL.
  std::vector<std::vector<Op>> ops(p);
  std::vector<int> groups(p, 0);
  for (int r = 0; r < p; ++r) {
    bool queued = false;  // sends waiting for the next group
    for (std::size_t i = 0; i < schedules[r].size(); ++i) {
      const Action& a = schedules[r][i];
      if (!is_message(a.kind)) continue;
      ops[r].push_back({a, action_peer(shape, r, a), groups[r], i});
      if (!is_send(a.kind)) out.closing[r].push_back(i);
      if (is_send(a.kind)) {
        queued = true;
      } else {
        ++groups[r];  // a receive closes its group
        queued = false;
      }
    }
    if (queued) ++groups[r];
  }
  // Untagged matching: the k-th send from a to b meets the k-th receive on b from a.
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> sends, receives;  // (from, to) -> (rank, op)
  for (int r = 0; r < p; ++r)
    for (int i = 0; i < static_cast<int>(ops[r].size()); ++i) {
      const Op& op = ops[r][i];
      if (is_send(op.action.kind))
        sends[{r, op.peer}].push_back({r, i});
      else
        receives[{op.peer, r}].push_back({r, i});
    }
  for (const auto& [pair, sent] : sends) {
    const std::vector<std::pair<int, int>>& taken = receives[pair];
    SCALELAB_CHECK(sent.size() == taken.size(), "pipeline schedule ", schedule_name(shape), ": rank ", pair.first,
                   " sends ", sent.size(), " messages to rank ", pair.second, ", which receives ", taken.size());
    for (std::size_t k = 0; k < sent.size(); ++k) {
      Op& s = ops[sent[k].first][sent[k].second];
      Op& t = ops[taken[k].first][taken[k].second];
      if (!(carried(shape, pair.first, s.action) == carried(shape, pair.second, t.action)))
        throw Error("pipeline schedule " + schedule_name(shape) + " over an untagged backend (NCCL): rank " +
                    std::to_string(pair.first) + "'s message " + std::to_string(k) + " to rank " +
                    std::to_string(pair.second) + " is its " + describe_action(s.action) + ", but rank " +
                    std::to_string(pair.second) + "'s receive " + std::to_string(k) + " from it is its " +
                    describe_action(t.action));
      s.partner = taken[k].second;
      t.partner = sent[k].second;
    }
  }
  for (const auto& [pair, taken] : receives)
    SCALELAB_CHECK(sends[pair].size() == taken.size(), "pipeline schedule ", schedule_name(shape), ": rank ",
                   pair.second, " receives ", taken.size(), " messages from rank ", pair.first, ", which sends ",
                   sends[pair].size());

  // Run the groups: a pair of operations completes while both ranks are in the groups holding
  // them; a rank moves to its next group once every operation of its current one completed.
  std::vector<int> current(p, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < p; ++r)
      for (Op& op : ops[r]) {
        if (op.group != current[r] || op.done) continue;
        Op& partner = ops[op.peer][op.partner];
        if (partner.group != current[op.peer]) continue;
        op.done = partner.done = true;
        moved = true;
      }
    for (int r = 0; r < p; ++r) {
      if (current[r] == groups[r]) continue;
      bool finished = true;
      for (const Op& op : ops[r])
        if (op.group == current[r] && !op.done) finished = false;
      if (finished) {
        ++current[r];
        moved = true;
      }
    }
  }
  std::string blocked;
  for (int r = 0; r < p; ++r) {
    out.groups += groups[r];
    if (current[r] == groups[r]) continue;
    blocked += "\n  rank " + std::to_string(r) + " waits in its group " + std::to_string(current[r]) + ": " +
               describe_group(ops[r], current[r]);
    for (const Op& op : ops[r])
      if (op.group == current[r] && !op.done && is_send(op.action.kind) &&
          ops[op.peer][op.partner].group > current[op.peer])
        out.stuck_sends[r].push_back(op.index);
  }
  if (!blocked.empty())
    out.error = "pipeline schedule " + schedule_name(shape) +
                " deadlocks over an untagged backend whose sends wait for their receive (NCCL):" + blocked;
  return out;
}

// Moves each stuck send of rank r past the receive that closes its group, into the next group
// (sends only ever move later: after the compute that produced them, in their order). A later
// send of the group to the same peer meets a later receive, so it is stuck too and moves along:
// the order per pair, which the matching relies on, stays. Returns whether any moved (a send in
// a rank's last group, which no receive closes, cannot).
bool delay_stuck_sends(const Replay& replayed, std::vector<RankSchedule>& lists) {
  bool moved = false;
  for (std::size_t r = 0; r < lists.size(); ++r) {
    const std::vector<std::size_t>& stuck = replayed.stuck_sends[r];
    if (stuck.empty()) continue;
    const std::vector<std::size_t>& closing = replayed.closing[r];
    std::map<std::size_t, std::vector<Action>> after;  // a receive's list index -> sends to put after it
    for (std::size_t i : stuck) {
      const auto next = std::upper_bound(closing.begin(), closing.end(), i);
      if (next != closing.end()) after[*next].push_back(lists[r][i]);
    }
    if (after.empty()) continue;
    RankSchedule rebuilt;
    for (std::size_t i = 0; i < lists[r].size(); ++i) {
      const bool moving = std::find(stuck.begin(), stuck.end(), i) != stuck.end() &&
                          std::upper_bound(closing.begin(), closing.end(), i) != closing.end();
      if (!moving) rebuilt.push_back(lists[r][i]);
      if (const auto it = after.find(i); it != after.end())
        rebuilt.insert(rebuilt.end(), it->second.begin(), it->second.end());
    }
    lists[r] = std::move(rebuilt);
    moved = true;
  }
  return moved;
}

}  // namespace

int check_rendezvous(const PipelineShape& shape, const std::vector<RankSchedule>& schedules) {
  const Replay replayed = replay(shape, schedules);
  if (!replayed.error.empty()) throw Error(replayed.error);
  return replayed.groups;
}

std::vector<RankSchedule> rendezvous_schedules(const PipelineShape& shape) {
  std::vector<RankSchedule> lists = build_schedules(shape);
  for (;;) {
    const Replay replayed = replay(shape, lists);
    if (replayed.error.empty()) return lists;
    if (!delay_stuck_sends(replayed, lists)) throw Error(replayed.error);
  }
}

}  // namespace scalelab
