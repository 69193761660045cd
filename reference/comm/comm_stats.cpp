// Names and the printed report of the communication counters.
#include "comm/comm_stats.hpp"

#include <cstdio>

namespace scalelab {

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::kSend: return "send";
    case CommOp::kRecv: return "recv";
    case CommOp::kAllReduce: return "all_reduce";
    case CommOp::kReduceScatter: return "reduce_scatter";
    case CommOp::kAllGather: return "all_gather";
    case CommOp::kBroadcast: return "broadcast";
    case CommOp::kBarrier: return "barrier";
    case CommOp::kSplit: return "split";
    case CommOp::kRingAllReduce: return "ring_all_reduce";
    case CommOp::kRingReduceScatter: return "ring_reduce_scatter";
    case CommOp::kRingAllGather: return "ring_all_gather";
    case CommOp::kCount: break;
  }
  return "?";
}

std::string CommStats::report() const {
  std::string out;
  char line[192];
  std::snprintf(line, sizeof line, "%-20s %10s %16s %16s %12s %10s\n", "op", "calls", "bytes sent", "bytes received",
                "seconds", "GB/s out");
  out += line;
  for (int i = 0; i < kCommOpCount; ++i) {
    const OpStats& s = ops_[static_cast<std::size_t>(i)];
    if (s.calls == 0) continue;
    const double gbs = s.seconds > 0 ? static_cast<double>(s.bytes_sent) / s.seconds / 1e9 : 0.0;
    std::snprintf(line, sizeof line, "%-20s %10llu %16llu %16llu %12.6f %10.3f\n", comm_op_name(static_cast<CommOp>(i)),
                  static_cast<unsigned long long>(s.calls), static_cast<unsigned long long>(s.bytes_sent),
                  static_cast<unsigned long long>(s.bytes_received), s.seconds, gbs);
    out += line;
  }
  return out;
}

}  // namespace scalelab
