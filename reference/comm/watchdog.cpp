// The watchdog thread: wakes a few times a second and ends the job when a slot has been armed
// for longer than the limit.
#include "comm/watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "comm/flight_report.hpp"
#include "core/error.hpp"

namespace scalelab {

Watchdog::Watchdog(double timeout_seconds, OnExpire on_expire, std::shared_ptr<FlightBoard> board)
    : timeout_seconds_(timeout_seconds),
      on_expire_(std::move(on_expire)),
      board_(board ? std::move(board) : std::make_shared<FlightBoard>()) {
  require(timeout_seconds > 0 && timeout_seconds < 1e9, "comm timeout",
          "must be positive and finite, got " + std::to_string(timeout_seconds),
          "give the seconds a blocking call may wait before the job is ended (0 turns the watchdog off)");
  board_->heartbeat(now_ns());
  thread_ = std::thread([this] { run(); });
}

double Watchdog::period_seconds() const { return std::clamp(timeout_seconds_ / 10, 0.05, 1.0); }

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<Watchdog::Slot> Watchdog::register_slot(int rank, int size, int world_rank) {
  auto slot = std::make_shared<Slot>();
  slot->rank = rank;
  slot->size = size;
  slot->world_rank = world_rank;
  std::lock_guard<std::mutex> lock(mutex_);
  slot->entry = board_->claim();
  slots_.push_back(slot);
  return slot;
}

void Watchdog::unregister_slot(const Slot* slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Under the lock, so that the thread never reads an entry that is being handed back.
  board_->release(slot->entry);
  slots_.erase(std::remove_if(slots_.begin(), slots_.end(), [&](const auto& s) { return s.get() == slot; }),
               slots_.end());
}

std::int64_t Watchdog::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Watchdog::arm(Slot& slot, CommOp op, int peer, std::uint64_t call) {
  FlightEntry& e = *slot.entry;
  e.armed_op.store(static_cast<int>(op), std::memory_order_relaxed);
  e.armed_peer.store(peer, std::memory_order_relaxed);
  e.armed_call.store(call, std::memory_order_relaxed);
  e.armed_at_ns.store(now_ns(), std::memory_order_relaxed);
}

void Watchdog::run() {
  const auto period = std::chrono::duration<double>(period_seconds());
  const auto limit_ns = static_cast<std::int64_t>(timeout_seconds_ * 1e9);
  // A rank whose heartbeat is older than this is not running (stopped, frozen, dead): a few
  // missed ticks, and at least 2 s, so that a busy machine's late tick is not taken for one.
  const double stale_seconds = std::max(2.0, 4 * period_seconds());
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, period);
    if (stop_) break;
    const std::int64_t now = now_ns();
    board_->heartbeat(now);
    for (const auto& slot : slots_) {
      const FlightEntry& entry = *slot->entry;
      const std::int64_t armed = entry.armed_at_ns.load(std::memory_order_relaxed);
      if (armed == 0 || now - armed < limit_ns) continue;
      const auto op = static_cast<CommOp>(entry.armed_op.load(std::memory_order_relaxed));
      const int peer = entry.armed_peer.load(std::memory_order_relaxed);
      std::string call = comm_op_name(op);
      if (op == CommOp::kSend) call += " to rank " + std::to_string(peer);
      if (op == CommOp::kRecv) call += " from rank " + std::to_string(peer);
      if (op == CommOp::kBroadcast) call += " from root " + std::to_string(peer);
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeout_seconds_);
      std::string message = "rank " + std::to_string(slot->world_rank) + " (rank " + std::to_string(slot->rank) +
                            " of " + std::to_string(slot->size) + " in its communicator): " + call +
                            " did not complete within " + seconds +
                            " s (comm timeout). A peer rank has probably died or hung, or the ranks called different "
                            "collectives; ending the job.";
      std::string report = flight_report(*board_, entry, now, stale_seconds);
      if (!report.empty() && report.back() == '\n') report.pop_back();
      if (!report.empty()) message += "\n" + report;
      lock.unlock();
      on_expire_(message);  // does not return: it ends the process
      return;
    }
  }
}

}  // namespace scalelab
