// Timeline recording and Chrome trace output.
#include "dist/timeline.hpp"

#include <algorithm>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "comm/communicator.hpp"
#include "io/atomic_file.hpp"

namespace scalelab {

Timeline::Timeline() : origin_(std::chrono::steady_clock::now()) {}

double Timeline::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
}

void Timeline::add(const std::string& name, const std::string& category, int track, double start_us, double end_us) {
  events_.push_back({name, category, track, start_us, std::max(0.0, end_us - start_us)});
}

double Timeline::origin_clock_us() const {
  return std::chrono::duration<double, std::micro>(origin_.time_since_epoch()).count();
}

std::string Timeline::chrome_trace_json(int rank, double offset_us) const {
  nlohmann::json events = nlohmann::json::array();
  const char* tracks[] = {"compute", "communication"};
  for (int t = 0; t < 2; ++t)
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", t}, {"args", {{"name", tracks[t]}}}});
  events.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
  for (const auto& e : events_)
    events.push_back({{"name", e.name},
                      {"cat", e.category},
                      {"ph", "X"},
                      {"pid", rank},
                      {"tid", e.track},
                      {"ts", e.start_us + offset_us},
                      {"dur", e.duration_us}});
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

void Timeline::write_chrome_trace(const std::string& path, int rank) const {
  write_file_atomically(path, chrome_trace_json(rank));
}

void write_merged_chrome_trace(Communicator& comm, const Timeline& timeline, const std::string& path) {
  // Everyone's start on rank 0's axis: the earliest origin is time 0.
  double origin = timeline.origin_clock_us();
  comm.all_reduce(&origin, &origin, 1, DataType::kFloat64, ReduceOp::kMin);
  const std::string mine = timeline.chrome_trace_json(comm.rank(), timeline.origin_clock_us() - origin);
  if (comm.rank() != 0) {
    std::int64_t size = static_cast<std::int64_t>(mine.size());
    comm.send(&size, 1, DataType::kInt64, 0);
    comm.send(mine.data(), mine.size(), DataType::kUInt8, 0);
    comm.barrier();  // the file is complete when any rank returns
    return;
  }
  nlohmann::json merged = nlohmann::json::parse(mine);
  for (int r = 1; r < comm.size(); ++r) {
    std::int64_t size = 0;
    comm.recv(&size, 1, DataType::kInt64, r);
    std::string text(static_cast<std::size_t>(size), '\0');
    comm.recv(text.data(), text.size(), DataType::kUInt8, r);
    nlohmann::json theirs = nlohmann::json::parse(text);  // a named value: the loop below iterates into it
    for (auto& e : theirs["traceEvents"]) merged["traceEvents"].push_back(std::move(e));
  }
  write_file_atomically(path, merged.dump());
  comm.barrier();
}

namespace {
// The intervals of one category's events, merged where they overlap (several buckets are in
// flight at once).
std::vector<std::pair<double, double>> merged_spans(const std::vector<TimelineEvent>& events, const char* category) {
  std::vector<std::pair<double, double>> spans, merged;
  for (const auto& e : events)
    if (e.category == category) spans.emplace_back(e.start_us, e.start_us + e.duration_us);
  std::sort(spans.begin(), spans.end());
  for (const auto& span : spans) {
    if (merged.empty() || span.first > merged.back().second)
      merged.push_back(span);
    else
      merged.back().second = std::max(merged.back().second, span.second);
  }
  return merged;
}
}  // namespace

double hidden_fraction(const std::vector<TimelineEvent>& events) {
  const auto comm = merged_spans(events, "comm"), compute = merged_spans(events, "compute");
  double total = 0, hidden = 0;
  for (const auto& [s, t] : comm) {
    total += t - s;
    for (const auto& [cs, ct] : compute) hidden += std::max(0.0, std::min(t, ct) - std::max(s, cs));
  }
  return total > 0 ? hidden / total : 0.0;
}

double comm_busy_us(const std::vector<TimelineEvent>& events) {
  double total = 0;
  for (const auto& [s, t] : merged_spans(events, "comm")) total += t - s;
  return total;
}

}  // namespace scalelab
