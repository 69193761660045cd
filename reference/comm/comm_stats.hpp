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
  void reset() { ops_ = {}; }
  // One line per operation with at least one call: calls, bytes sent/received, seconds, GB/s.
  std::string report() const;

 private:
  std::array<OpStats, kCommOpCount> ops_{};
};

}  // namespace scalelab
