// The watchdog (stage 04): one thread per process that ends the job when a blocking
// communication call has waited longer than a limit. Without it, a rank whose peer hangs (an
// endless loop, a mismatched collective, a lost GPU) waits forever; with it, the job stops with
// a message that names the waiting rank, the call and the peer.
//
// Each communicator registers one slot; its blocking calls arm the slot on entry and disarm it
// on exit (a few relaxed atomic stores, cheap enough for every call). The thread looks at the
// slots a few times a second. A communicator is used by one thread at a time; several
// communicators (the sub-groups of a grid) share one watchdog.
//
// A slot's state lives in the communicator's flight-recorder entry (comm/flight_recorder.hpp),
// on the job's flight board (comm/flight_board.hpp), so that the other ranks can see where this
// one waits; the thread also ticks the board's heartbeat. When a call expires, the message adds
// the flight recorder's verdict (comm/flight_report.hpp): which rank fell behind, and which call
// it never made.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_stats.hpp"
#include "comm/flight_board.hpp"

namespace scalelab {

class Watchdog {
 public:
  struct Slot {
    int rank = 0;                  // in the communicator
    int size = 1;                  // of the communicator
    int world_rank = 0;            // in the whole job, for the message
    FlightEntry* entry = nullptr;  // the armed state and the flight records (the board's)
  };
  // Called once, from the watchdog thread, with a message naming the rank and the call; it must
  // end the process (the MPI backend calls MPI_Abort, which takes every rank down).
  using OnExpire = std::function<void(const std::string& message)>;

  // board: where the slots' records live; null makes a private one (this process alone).
  Watchdog(double timeout_seconds, OnExpire on_expire, std::shared_ptr<FlightBoard> board = nullptr);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  double timeout_seconds() const { return timeout_seconds_; }
  std::shared_ptr<Slot> register_slot(int rank, int size, int world_rank);
  void unregister_slot(const Slot* slot);

  // call: the flight recorder's number of the call waited on (0: none recorded).
  static void arm(Slot& slot, CommOp op, int peer, std::uint64_t call = 0);
  static void disarm(Slot& slot) { slot.entry->armed_at_ns.store(0, std::memory_order_relaxed); }
  static std::int64_t now_ns();
  // The thread's period: often enough that the job ends within about a tenth of the limit.
  double period_seconds() const;

 private:
  void run();

  double timeout_seconds_;
  OnExpire on_expire_;
  std::shared_ptr<FlightBoard> board_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::vector<std::shared_ptr<Slot>> slots_;
  std::thread thread_;
};

// Arms a slot for the lifetime of a blocking call (no-op without a watchdog).
class WatchScope {
 public:
  WatchScope(Watchdog::Slot* slot, CommOp op, int peer, std::uint64_t call = 0) : slot_(slot) {
    if (slot_) Watchdog::arm(*slot_, op, peer, call);
  }
  ~WatchScope() {
    if (slot_) Watchdog::disarm(*slot_);
  }
  WatchScope(const WatchScope&) = delete;
  WatchScope& operator=(const WatchScope&) = delete;

 private:
  Watchdog::Slot* slot_;
};

}  // namespace scalelab
