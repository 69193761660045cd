// Per-communicator counters (stage 04): for every operation type, how many calls, how many
// bytes this rank sent and received, and how many seconds it spent inside them. Tests read them
// to check bytes on the wire against 2(n-1)/n * S; runs print them to show where time went.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace scalelab {

// Point-to-point, the backend's built-in collectives, and the hand-written ring collectives
// (comm/ring.hpp). A ring collective is built from sends and receives, so its bytes appear both
// in its own row and in the send/recv rows: compare rows, never add them up.
enum class CommOp : int {
  kSend,
  kRecv,
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kBarrier,
  kSplit,
  kRingAllReduce,
  kRingReduceScatter,
  kRingAllGather,
  kCount
};
constexpr int kCommOpCount = static_cast<int>(CommOp::kCount);
const char* comm_op_name(CommOp op);

struct OpStats {
  std::uint64_t calls = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  // Wall time inside the calls on this rank. A non-blocking send or receive counts the time to
  // post it plus the time its wait() blocked; overlapping requests overlap in time too.
  double seconds = 0;
};

class CommStats {
 public:
  OpStats& operator[](CommOp op) { return ops_[static_cast<std::size_t>(op)]; }
  const OpStats& operator[](CommOp op) const { return ops_[static_cast<std::size_t>(op)]; }
  void reset() {
    ops_ = {};
    peak_recvs_in_flight_ = 0;
  }
  // One line per operation with at least one call: calls, bytes sent/received, seconds, GB/s.
  std::string report() const;

  // The most receives posted and not yet complete at once, counted at each irecv since the last
  // reset. A receive completes at its wait(), at a test() that returns true, or when its Request
  // is dropped. Stage 04's ring keeps options.window receives in flight ahead of the one it
  // adds: this is how a test sees the window (a count, not a clock).
  std::uint64_t peak_recvs_in_flight() const { return peak_recvs_in_flight_; }
  void note_recvs_in_flight(std::uint64_t now) {
    if (now > peak_recvs_in_flight_) peak_recvs_in_flight_ = now;
  }

 private:
  std::array<OpStats, kCommOpCount> ops_{};
  std::uint64_t peak_recvs_in_flight_ = 0;
};

}  // namespace scalelab
