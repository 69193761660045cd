// The flight recorder's verdict (stage 04): what the watchdog adds to its message when a call has
// waited too long. It reads every rank's records on the flight board (comm/flight_board.hpp),
// finds the ranks of the stuck communicator that fell behind, and names them with the call they
// never made:
//
//   flight recorder: rank 1 is behind on communicator 'world': its last collective there is
//     all_reduce #41 (..., done 5.2 s ago); it never called all_reduce #42, which rank 0 waits
//     in; it is in no communication call; no sign of life for 5.3 s (stopped, frozen or dead)
//
// followed by each rank's last calls on that communicator. How a rank is judged:
//   behind         it posted fewer collectives on the communicator than the waiting rank's
//                  number (for a send or receive: its peer never posted the matching call);
//   no sign of life  its watchdog's heartbeat is older than a few ticks (SIGSTOP, a frozen
//                  machine, a dead process);
//   in no call     it is not blocked in any communication call (computing, or looping forever);
//                  when nobody is behind or silent, a rank that posted the collective (non-blocking)
//                  but is in no call is named: it cannot make progress on it.
#pragma once

#include <cstdint>
#include <string>

#include "comm/flight_board.hpp"

namespace scalelab {

// The report for `waiting`, an entry of this rank's page whose blocking call expired, as of
// now_ns; heartbeat_stale_s: a heartbeat older than this means the rank is not running. Empty
// when the entry has no records (a watchdog slot used without a communicator).
std::string flight_report(const FlightBoard& board, const FlightEntry& waiting, std::int64_t now_ns,
                          double heartbeat_stale_s);

}  // namespace scalelab
