// The flight recorder's write side and the text of one record.
#include "comm/flight_recorder.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "comm/watchdog.hpp"

namespace scalelab {

namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;
FlightRecord& slot_for(FlightEntry& entry, std::uint64_t call) { return entry.ring[call % kFlightRing]; }
}  // namespace

std::uint64_t FlightRecorder::begin(FlightEntry& entry, const std::string& name, int rank, int size, CommOp op,
                                    bool collective, std::size_t count, int peer) {
  if (entry.published.load(kRelaxed) == 0) {
    // Written once, before the release store that makes the entry visible to readers.
    const std::size_t n = std::min(name.size(), static_cast<std::size_t>(kFlightNameLength - 1));
    std::memcpy(entry.name, name.data(), n);
    entry.name[n] = '\0';
    entry.rank = rank;
    entry.size = size;
    entry.published.store(1, std::memory_order_release);
  }
  const std::uint64_t call = entry.calls.load(kRelaxed) + 1;
  const std::uint64_t number = collective ? entry.collectives.load(kRelaxed) + 1 : 0;
  FlightRecord& r = slot_for(entry, call);
  // Empty the slot first, so that a reader never takes the old call's end for the new call's.
  r.call.store(0, kRelaxed);
  r.ended_ns.store(0, kRelaxed);
  r.collective.store(number, kRelaxed);
  r.op.store(static_cast<std::int32_t>(op), kRelaxed);
  r.peer.store(peer, kRelaxed);
  r.count.store(count, kRelaxed);
  r.started_ns.store(Watchdog::now_ns(), kRelaxed);
  r.call.store(call, std::memory_order_release);
  entry.calls.store(call, kRelaxed);
  if (collective) entry.collectives.store(number, kRelaxed);
  return call;
}

void FlightRecorder::end(FlightEntry& entry, std::uint64_t call) {
  FlightRecord& r = slot_for(entry, call);
  if (call == 0 || r.call.load(kRelaxed) != call) return;  // overwritten by newer calls: nothing to mark
  r.ended_ns.store(Watchdog::now_ns(), kRelaxed);
  const std::uint64_t number = r.collective.load(kRelaxed);
  // Non-blocking collectives may complete out of order; keep the highest.
  if (number > entry.collectives_done.load(kRelaxed)) entry.collectives_done.store(number, kRelaxed);
}

void FlightRecorder::reset(FlightEntry& entry) {
  entry.published.store(0, std::memory_order_release);
  entry.name[0] = '\0';
  entry.rank = 0;
  entry.size = 1;
  entry.calls.store(0, kRelaxed);
  entry.collectives.store(0, kRelaxed);
  entry.collectives_done.store(0, kRelaxed);
  entry.armed_at_ns.store(0, kRelaxed);
  entry.armed_op.store(0, kRelaxed);
  entry.armed_peer.store(-1, kRelaxed);
  entry.armed_call.store(0, kRelaxed);
  for (FlightRecord& r : entry.ring) r.call.store(0, kRelaxed);
}

std::string describe_record(const FlightRecord& r, std::int64_t now_ns) {
  const auto op = static_cast<CommOp>(r.op.load(kRelaxed));
  const std::uint64_t number = r.collective.load(kRelaxed);
  const int peer = r.peer.load(kRelaxed);
  std::string text = comm_op_name(op);
  if (number > 0) text += " #" + std::to_string(number);
  if (op == CommOp::kSend) text += " to rank " + std::to_string(peer);
  if (op == CommOp::kRecv) text += " from rank " + std::to_string(peer);
  if (op == CommOp::kBroadcast) text += " from root " + std::to_string(peer);
  text += " (" + std::to_string(r.count.load(kRelaxed)) + " elements, call " + std::to_string(r.call.load(kRelaxed));
  const std::int64_t started = r.started_ns.load(kRelaxed);
  const std::int64_t ended = r.ended_ns.load(kRelaxed);
  char when[64];
  if (ended != 0)
    std::snprintf(when, sizeof when, ", done %.1f s ago)", static_cast<double>(now_ns - ended) * 1e-9);
  else
    std::snprintf(when, sizeof when, ", not complete, posted %.1f s ago)",
                  static_cast<double>(now_ns - started) * 1e-9);
  return text + when;
}

}  // namespace scalelab
