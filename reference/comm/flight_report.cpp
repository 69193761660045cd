// The flight recorder's verdict: which ranks of a stuck communicator fell behind, and why.
#include "comm/flight_report.hpp"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace scalelab {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr int kListed = 4;  // records per rank in the listing

bool published(const FlightEntry& e) { return e.published.load(std::memory_order_acquire) == 1; }

std::string seconds(std::int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(ns) * 1e-9);
  return text;
}

const FlightRecord* find_call(const FlightEntry& e, std::uint64_t call) {
  const FlightRecord& r = e.ring[call % kFlightRing];
  return call != 0 && r.call.load(std::memory_order_acquire) == call ? &r : nullptr;
}

// "all_reduce #42", "recv from rank 1": a call as the headline names it.
std::string call_name(const FlightRecord& r) {
  const auto op = static_cast<CommOp>(r.op.load(kRelaxed));
  std::string text = comm_op_name(op);
  if (const std::uint64_t n = r.collective.load(kRelaxed)) text += " #" + std::to_string(n);
  if (op == CommOp::kSend) text += " to rank " + std::to_string(r.peer.load(kRelaxed));
  if (op == CommOp::kRecv) text += " from rank " + std::to_string(r.peer.load(kRelaxed));
  return text;
}

// The entry's records, oldest first.
std::vector<const FlightRecord*> records(const FlightEntry& e) {
  std::vector<const FlightRecord*> out;
  const std::uint64_t last = e.calls.load(kRelaxed);
  for (std::uint64_t c = last >= kFlightRing ? last - kFlightRing + 1 : 1; c <= last; ++c)
    if (const FlightRecord* r = find_call(e, c)) out.push_back(r);
  return out;
}

const FlightRecord* last_collective(const FlightEntry& e) {
  const std::vector<const FlightRecord*> all = records(e);
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if ((*it)->collective.load(kRelaxed) > 0) return *it;
  return nullptr;
}

// Where the rank is blocked right now, on any communicator ("" when in no call).
std::string blocked_where(const FlightPage& page, std::int64_t now_ns) {
  for (const FlightEntry& e : page.entries) {
    const std::int64_t armed = e.armed_at_ns.load(kRelaxed);
    if (!published(e) || armed == 0) continue;
    const FlightRecord* r = find_call(e, e.armed_call.load(kRelaxed));
    const std::string what = r ? call_name(*r) : comm_op_name(static_cast<CommOp>(e.armed_op.load(kRelaxed)));
    return "it waits in " + what + " on '" + e.name + "' for " + seconds(now_ns - armed);
  }
  return "";
}

struct Member {
  int world_rank = -1;
  const FlightPage* page = nullptr;
  const FlightEntry* entry = nullptr;
};

// The ranks of the communicator called `name`, by their rank in it (world_rank -1: no record).
std::vector<Member> members_of(const FlightBoard& board, const FlightEntry& waiting) {
  std::vector<Member> members(static_cast<std::size_t>(waiting.size));
  for (int w = 0; w < board.world_size(); ++w) {
    const FlightPage* page = board.page(w);
    if (!page) continue;
    for (const FlightEntry& e : page->entries) {
      if (!published(e) || e.size != waiting.size || std::strcmp(e.name, waiting.name) != 0) continue;
      if (e.rank < 0 || e.rank >= waiting.size) continue;
      members[static_cast<std::size_t>(e.rank)] = {w, page, &e};
      break;
    }
  }
  return members;
}

std::string who(const Member& m, const FlightEntry& waiting) {
  return "rank " + std::to_string(m.world_rank) + " (rank " + std::to_string(m.entry->rank) + " of " +
         std::to_string(waiting.size) + " on '" + waiting.name + "')";
}

}  // namespace

std::string flight_report(const FlightBoard& board, const FlightEntry& waiting, std::int64_t now_ns,
                          double heartbeat_stale_s) {
  if (!published(waiting)) return "";
  const FlightRecord* stuck = find_call(waiting, waiting.armed_call.load(kRelaxed));
  if (!stuck) return "";
  const std::uint64_t number = stuck->collective.load(kRelaxed);  // 0: a send or receive
  const auto op = static_cast<CommOp>(stuck->op.load(kRelaxed));
  const int peer = stuck->peer.load(kRelaxed);
  const std::string name = waiting.name;
  const auto stale_ns = static_cast<std::int64_t>(heartbeat_stale_s * 1e9);
  const std::vector<Member> members = members_of(board, waiting);

  // Who waits in the same collective (or, for a send or receive, this rank alone).
  std::string waiters;
  for (const Member& m : members) {
    if (!m.entry) continue;
    const bool in_it = number > 0
                           ? m.entry->collectives.load(kRelaxed) >= number && !blocked_where(*m.page, now_ns).empty()
                           : m.world_rank == board.world_rank();
    if (in_it) waiters += (waiters.empty() ? "rank " : ", rank ") + std::to_string(m.world_rank);
  }

  std::string verdicts, missing;
  for (const Member& m : members) {
    if (!m.entry) continue;
    const bool me = m.world_rank == board.world_rank();
    const FlightEntry& e = *m.entry;
    const std::int64_t silent = now_ns - m.page->heartbeat_ns.load(kRelaxed);
    const bool stale = !me && silent > stale_ns;
    const std::string where = blocked_where(*m.page, now_ns);
    std::string line;
    if (number > 0 && e.collectives.load(kRelaxed) < number) {
      const FlightRecord* last = last_collective(e);
      line = who(m, waiting) + " is behind: its last collective there is " +
             (last ? describe_record(*last, now_ns) : std::string("none")) + "; it never called " + comm_op_name(op) +
             " #" + std::to_string(number) + ", which " + waiters + " wait" +
             (waiters.find(',') == std::string::npos ? "s" : "") + " in";
    } else if (number == 0 && e.rank == peer && !me) {
      const std::vector<const FlightRecord*> all = records(e);
      line = who(m, waiting) + " has not made the " + (op == CommOp::kRecv ? "send" : "receive") + " that rank " +
             std::to_string(board.world_rank()) + "'s " + call_name(*stuck) + " waits for; its last call there is " +
             (all.empty() ? std::string("none") : describe_record(*all.back(), now_ns));
    } else if (stale) {
      line = who(m, waiting) + " stopped responding";
    } else {
      continue;
    }
    line += "; " + (where.empty() ? std::string("it is in no communication call") : where);
    if (stale) {
      line += "; no sign of life for " + seconds(silent) + " (stopped, frozen or dead";
      if (kill(m.page->pid, 0) != 0 && errno == ESRCH)
        line += ": its process " + std::to_string(m.page->pid) + " is gone";
      line += ")";
    }
    verdicts += "flight recorder: " + line + "\n";
  }
  // Nobody behind or silent, yet the collective does not complete: a rank that posted it (a
  // non-blocking call) but is in no communication call cannot make progress on it.
  if (verdicts.empty() && number > 0)
    for (const Member& m : members)
      if (m.entry && m.world_rank != board.world_rank() && blocked_where(*m.page, now_ns).empty())
        verdicts += "flight recorder: " + who(m, waiting) + " posted " + call_name(*stuck) +
                    " but is in no communication call, so it cannot complete there (computing, or an endless "
                    "loop), while " +
                    waiters + " wait" + (waiters.find(',') == std::string::npos ? "s" : "") + " in it\n";
  for (std::size_t j = 0; j < members.size(); ++j)
    if (!members[j].entry)
      missing += "flight recorder: rank " + std::to_string(j) + " of '" + name +
                 "' left no record (it runs on another machine, or never called anything on it)\n";

  std::string out = verdicts.empty() ? "flight recorder: no rank of '" + name +
                                           "' is behind or silent; the ranks may have called "
                                           "different collectives, or one is very slow\n"
                                     : verdicts;
  out += missing;
  if (!board.note().empty()) out += "flight recorder: " + board.note() + "\n";
  out += "flight recorder: the last calls on '" + name + "', oldest first:\n";
  for (const Member& m : members) {
    if (!m.entry) continue;
    const std::vector<const FlightRecord*> all = records(*m.entry);
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on " " + a temporary.
    out += "  rank ";
    out += std::to_string(m.world_rank);
    out += ":";
    for (std::size_t i = all.size() > kListed ? all.size() - kListed : 0; i < all.size(); ++i) {
      out += ' ';
      out += describe_record(*all[i], now_ns);
      if (i + 1 < all.size()) out += ';';
    }
    if (all.empty()) out += " none";
    out += "\n";
  }
  return out;
}

}  // namespace scalelab
