// A per-rank timeline in the Chrome trace-event format (open it in https://ui.perfetto.dev or
// chrome://tracing): complete events ("ph": "X") with a name, a category, a start and a
// duration in microseconds, on one of a few named tracks. Stage 04 records backward compute and
// every bucket's all-reduce, and computes from them how much communication backward hid.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace scalelab {

struct TimelineEvent {
  std::string name;
  std::string category;  // "compute" or "comm"
  int track = 0;         // 0: compute, 1: communication
  double start_us = 0, duration_us = 0;
};

class Timeline {
 public:
  Timeline();
  // Microseconds since this timeline was created.
  double now_us() const;
  // When it was created, in microseconds of the steady clock (one clock for every process of a
  // machine): what lines up the timelines of several ranks.
  double origin_clock_us() const;
  void add(const std::string& name, const std::string& category, int track, double start_us, double end_us);
  const std::vector<TimelineEvent>& events() const { return events_; }
  void clear() { events_.clear(); }
  // {"traceEvents": [...]} with pid = rank, named tracks; written atomically.
  void write_chrome_trace(const std::string& path, int rank) const;
  // offset_us is added to every start (to put several ranks on one time axis).
  std::string chrome_trace_json(int rank, double offset_us = 0) const;

 private:
  std::chrono::steady_clock::time_point origin_;
  std::vector<TimelineEvent> events_;
};

class Communicator;
// Collective over comm: every rank's timeline in one Chrome trace written by rank 0 at `path`,
// one process track per rank (pid = rank), on a common time axis (the steady clock: exact for
// ranks of one machine; across machines, as good as their clocks agree).
void write_merged_chrome_trace(Communicator& comm, const Timeline& timeline, const std::string& path);

// Of the time covered by "comm" events, the fraction during which a "compute" event ran too:
// the communication that compute hid. Overlapping events of one kind count once; 0 without comm.
double hidden_fraction(const std::vector<TimelineEvent>& events);
// The time covered by at least one comm interval.
double comm_busy_us(const std::vector<TimelineEvent>& events);

}  // namespace scalelab
