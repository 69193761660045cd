// The flight recorder (stage 04): every communicator remembers its last few calls, so that when
// the watchdog ends a stuck job the message can say which rank fell behind and which call it
// never made, as PyTorch's flight recorder does for NCCL process groups.
//
// Each communicator numbers its collectives 1, 2, 3, ... (the same numbers on every rank, since
// every rank of a communicator makes the same collectives in the same order) and keeps the last
// kFlightRing calls, collectives and point-to-point alike, in a small ring: the call's number,
// the operation, the element count, the peer, and when it started and ended. Recording a call is
// a handful of relaxed atomic stores into memory set aside beforehand: no allocation, no lock,
// cheap enough for every call.
//
// The records live in plain structs with fixed-size fields, so that they can be placed in a page
// of memory that the other ranks of the job can read (comm/flight_board.hpp): a rank that is
// stopped or frozen cannot answer a question, but its records can still be read by a rank that
// is waiting for it. Atomics keep the reads defined while the owner writes; a reader may see a
// record half-updated only if its owner is still running, and then the record is about to be
// overwritten anyway (a stuck rank's records do not change).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/comm_stats.hpp"

namespace scalelab {

inline constexpr int kFlightRing = 8;         // calls remembered per communicator
inline constexpr int kFlightNameLength = 64;  // a communicator's name, NUL included

// One call. call == 0: the slot is empty.
struct FlightRecord {
  std::atomic<std::uint64_t> call{0};        // 1, 2, ...: every call on this communicator
  std::atomic<std::uint64_t> collective{0};  // 1, 2, ...: the collective's number; 0 for send/recv
  std::atomic<std::int32_t> op{0};           // a CommOp
  std::atomic<std::int32_t> peer{-1};        // send/recv: the other rank; broadcast: the root
  std::atomic<std::uint64_t> count{0};       // elements
  std::atomic<std::int64_t> started_ns{0};   // Watchdog::now_ns() when posted
  std::atomic<std::int64_t> ended_ns{0};     // when it completed; 0 while it has not
};

// One communicator's recorder: who it is, how far it got, where it waits, and its last calls.
struct FlightEntry {
  // 1 once name/rank/size below are written (release); readers ignore an entry until then.
  std::atomic<std::uint32_t> published{0};
  char name[kFlightNameLength] = {};  // "world", "world/0:1" (split 0 of world, color 1), ...
  std::int32_t rank = 0;              // in the communicator
  std::int32_t size = 1;
  std::atomic<std::uint64_t> calls{0};             // calls posted so far
  std::atomic<std::uint64_t> collectives{0};       // collectives posted so far
  std::atomic<std::uint64_t> collectives_done{0};  // the highest collective number completed
  // The blocking wait in progress (the watchdog's slot): since when (0: not waiting), which call.
  std::atomic<std::int64_t> armed_at_ns{0};
  std::atomic<std::int32_t> armed_op{0};
  std::atomic<std::int32_t> armed_peer{-1};
  std::atomic<std::uint64_t> armed_call{0};
  FlightRecord ring[kFlightRing];
};

// The write side, used by Communicator on the thread that makes the calls.
class FlightRecorder {
 public:
  // Records the start of a call; returns its call number (for end()). The first call also
  // publishes the communicator's name, rank and size.
  static std::uint64_t begin(FlightEntry& entry, const std::string& name, int rank, int size, CommOp op,
                             bool collective, std::size_t count, int peer);
  // Records that call `call` completed (nothing if the ring has moved on past it).
  static void end(FlightEntry& entry, std::uint64_t call);
  // Empties the entry for another communicator.
  static void reset(FlightEntry& entry);
};

// "all_reduce #42 (1024 elements)", "recv #7 from rank 1 (64 elements)", with "done" or
// "waiting 5.0 s" after it as of now_ns.
std::string describe_record(const FlightRecord& r, std::int64_t now_ns);

}  // namespace scalelab
