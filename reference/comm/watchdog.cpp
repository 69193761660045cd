// The watchdog thread: wakes a few times a second and ends the job when a slot has been armed
// for longer than the limit.
#include "comm/watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.hpp"

namespace scalelab {

Watchdog::Watchdog(double timeout_seconds, OnExpire on_expire)
    : timeout_seconds_(timeout_seconds), on_expire_(std::move(on_expire)) {
  require(timeout_seconds > 0, "comm timeout", "must be positive, got " + std::to_string(timeout_seconds),
          "give the seconds a blocking call may wait before the job is ended (0 turns the watchdog off)");
  thread_ = std::thread([this] { run(); });
}

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
  slots_.push_back(slot);
  return slot;
}

void Watchdog::unregister_slot(const Slot* slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  slots_.erase(std::remove_if(slots_.begin(), slots_.end(), [&](const auto& s) { return s.get() == slot; }),
               slots_.end());
}

std::int64_t Watchdog::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Watchdog::arm(Slot& slot, CommOp op, int peer) {
  slot.op.store(static_cast<int>(op), std::memory_order_relaxed);
  slot.peer.store(peer, std::memory_order_relaxed);
  slot.armed_at_ns.store(now_ns(), std::memory_order_relaxed);
}

void Watchdog::run() {
  // Check often enough that the job ends within about a tenth of the limit after it passes.
  const auto period = std::chrono::duration<double>(std::clamp(timeout_seconds_ / 10, 0.05, 1.0));
  const auto limit_ns = static_cast<std::int64_t>(timeout_seconds_ * 1e9);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, period);
    if (stop_) break;
    const std::int64_t now = now_ns();
    for (const auto& slot : slots_) {
      const std::int64_t armed = slot->armed_at_ns.load(std::memory_order_relaxed);
      if (armed == 0 || now - armed < limit_ns) continue;
      const auto op = static_cast<CommOp>(slot->op.load(std::memory_order_relaxed));
      const int peer = slot->peer.load(std::memory_order_relaxed);
      std::string call = comm_op_name(op);
      if (op == CommOp::kSend) call += " to rank " + std::to_string(peer);
      if (op == CommOp::kRecv) call += " from rank " + std::to_string(peer);
      if (op == CommOp::kBroadcast) call += " from root " + std::to_string(peer);
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeout_seconds_);
      const std::string message =
          "rank " + std::to_string(slot->world_rank) + " (rank " + std::to_string(slot->rank) + " of " +
          std::to_string(slot->size) + " in its communicator): " + call + " did not complete within " + seconds +
          " s (comm timeout). A peer rank has probably died or hung, or the ranks called different "
          "collectives; ending the job.";
      lock.unlock();
      on_expire_(message);  // does not return: it ends the process
      return;
    }
  }
}

}  // namespace scalelab
