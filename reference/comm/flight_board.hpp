// The flight board (stage 04): where the ranks of a job leave their flight records
// (comm/flight_recorder.hpp) for each other to read when the job is stuck.
//
// Why a side channel: when the watchdog fires, the communicator it guards is the one thing that
// does not work (a collective or a receive waits for a rank that never comes), and a stopped or
// frozen rank cannot answer any question at all. So each rank keeps its records in one small
// page of shared memory, a file of its own in a directory that rank 0 makes for the job (under
// /dev/shm, which is memory, when it exists), and every rank maps every other rank's page once at
// start-up. Writing a record is then a store to memory; reading another rank's records, even
// those of a rank stopped with SIGSTOP, is a load. The files are unlinked as soon as everyone has
// mapped them, so nothing is left behind however the job ends. Its limit: only ranks on the same
// machine can read each other's pages; a rank on another machine is reported as "no record".
//
// A heartbeat in the page, ticked by the rank's watchdog thread a few times a second, tells a
// reader whether the rank is still alive: a stopped, frozen or dead process stops ticking.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/flight_recorder.hpp"

namespace scalelab {

inline constexpr int kFlightEntries = 16;  // communicators per rank with shared records

// One rank's page.
struct FlightPage {
  std::uint64_t magic = 0;  // kFlightMagic once the owner has set the page up
  std::int32_t world_rank = 0;
  std::int32_t pid = 0;
  std::atomic<std::int64_t> heartbeat_ns{0};  // Watchdog::now_ns() of the watchdog's last tick
  FlightEntry entries[kFlightEntries];
};

class FlightBoard {
 public:
  // A board for one process alone: its page is private memory and there are no other ranks.
  FlightBoard();
  // The job's board, collective over the job: share(text) must hand rank 0's text to every rank
  // (a broadcast), barrier() must wait for every rank. Never throws: a rank whose page cannot be
  // shared keeps a private one, and note() says why some ranks' records cannot be read.
  static std::shared_ptr<FlightBoard> open_shared(int world_rank, int world_size,
                                                  const std::function<std::string(const std::string&)>& share,
                                                  const std::function<void()>& barrier);
  ~FlightBoard();
  FlightBoard(const FlightBoard&) = delete;
  FlightBoard& operator=(const FlightBoard&) = delete;

  // An entry for one communicator: in this rank's page while there is room, else a private one
  // (recorded, but not readable by other ranks).
  FlightEntry* claim();
  void release(FlightEntry* entry);
  void heartbeat(std::int64_t now_ns) { own_->heartbeat_ns.store(now_ns, std::memory_order_relaxed); }

  int world_rank() const { return world_rank_; }
  int world_size() const { return static_cast<int>(pages_.size()); }
  // A rank's page, or null where it cannot be read (another machine; set-up failed).
  const FlightPage* page(int world_rank) const { return pages_[static_cast<std::size_t>(world_rank)]; }
  const std::string& note() const { return note_; }

 private:
  FlightBoard(int world_rank, int world_size);

  int world_rank_ = 0;
  FlightPage* own_ = nullptr;
  std::unique_ptr<FlightPage> private_page_;  // when own_ is not shared
  std::vector<const FlightPage*> pages_;      // by world rank; own_ included
  std::vector<std::pair<void*, std::size_t>> mappings_;
  std::string note_;
  std::mutex mutex_;
  std::vector<bool> claimed_;
  std::vector<std::unique_ptr<FlightEntry>> overflow_;
};

}  // namespace scalelab
