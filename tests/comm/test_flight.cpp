// The flight recorder and its verdict, in one process: the ring of last calls, and the report the
// watchdog adds when a call expires. Three "ranks" are three threads that set up a real shared
// flight board (files under /dev/shm, mapped by each), so the report reads the others' pages
// exactly as it does in a job; what each rank did is written straight into its records, so the
// expected verdict is known independently of the code that judges it.
#include <catch2/catch.hpp>

#include <barrier>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/flight_board.hpp"
#include "comm/flight_recorder.hpp"
#include "comm/flight_report.hpp"
#include "comm/watchdog.hpp"
#include "expiry_capture.hpp"

using namespace scalelab;
using Catch::Contains;

namespace {

constexpr std::int64_t kSecond = 1'000'000'000;

// n boards set up together, as n ranks of one job would (each on its own thread).
std::vector<std::shared_ptr<FlightBoard>> job_boards(int n) {
  std::vector<std::shared_ptr<FlightBoard>> boards(static_cast<std::size_t>(n));
  std::barrier sync(n);
  std::string shared;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto share = [&](const std::string& text) {
        if (r == 0) shared = text;
        sync.arrive_and_wait();
        std::string out = shared;
        sync.arrive_and_wait();
        return out;
      };
      auto barrier = [&] { sync.arrive_and_wait(); };
      boards[static_cast<std::size_t>(r)] = FlightBoard::open_shared(r, n, share, barrier);
    });
  for (auto& t : threads) t.join();
  return boards;
}

// `done` completed collectives of `op` on a communicator entry, then (if `waiting`) one more
// posted and waited on since `waiting_s` seconds ago. Returns the entry.
FlightEntry& collectives(FlightBoard& board, const std::string& name, int rank, int size, int done, bool waiting,
                         double waiting_s = 6) {
  FlightEntry& e = *board.claim();
  for (int i = 0; i < done; ++i)
    FlightRecorder::end(e, FlightRecorder::begin(e, name, rank, size, CommOp::kAllReduce, true, 1024, -1));
  if (waiting) {
    const std::uint64_t call = FlightRecorder::begin(e, name, rank, size, CommOp::kAllReduce, true, 1024, -1);
    e.armed_op = static_cast<int>(CommOp::kAllReduce);
    e.armed_call = call;
    e.armed_at_ns = Watchdog::now_ns() - static_cast<std::int64_t>(waiting_s * kSecond);
  }
  return e;
}

}  // namespace

TEST_CASE("flight recorder: the ring keeps the last calls, numbers the collectives, marks completion", "[flight]") {
  FlightEntry e;
  std::uint64_t last = 0;
  for (int i = 0; i < 20; ++i) {  // collectives and sends alternate: 10 collectives
    const bool collective = i % 2 == 0;
    last = FlightRecorder::begin(e, "world", 1, 4, collective ? CommOp::kAllGather : CommOp::kSend, collective,
                                 static_cast<std::size_t>(i), collective ? -1 : 2);
    if (i < 19) FlightRecorder::end(e, last);
  }
  CHECK(std::string(e.name) == "world");
  CHECK(e.rank == 1);
  CHECK(e.size == 4);
  CHECK(e.calls == 20);
  CHECK(e.collectives == 10);
  CHECK(e.collectives_done == 10);  // the 19th call was the 10th collective
  const std::int64_t now = Watchdog::now_ns();
  const FlightRecord& newest = e.ring[last % kFlightRing];
  CHECK_THAT(describe_record(newest, now), Contains("send to rank 2 (19 elements, call 20, not complete"));
  const FlightRecord& before = e.ring[(last - 1) % kFlightRing];
  CHECK_THAT(describe_record(before, now), Contains("all_gather #10 (18 elements, call 19, done"));
  // A call the ring has moved past is not marked: its slot now holds a newer call.
  FlightRecorder::end(e, last - kFlightRing);
  CHECK(newest.ended_ns == 0);
}

TEST_CASE("flight report: names the rank that fell behind and the collective it never called", "[flight]") {
  auto boards = job_boards(3);
  for (int r = 0; r < 3; ++r) REQUIRE(boards[0]->page(r) != nullptr);  // every page readable
  CHECK(boards[0]->note().empty());
  // Ranks 0 and 2 wait in collective #5; rank 1 completed #4 and then stopped (no heartbeat).
  FlightEntry& waiting = collectives(*boards[0], "world", 0, 3, 4, true);
  collectives(*boards[1], "world", 1, 3, 4, false);
  collectives(*boards[2], "world", 2, 3, 4, true);
  const std::int64_t now = Watchdog::now_ns();
  for (auto& b : boards) b->heartbeat(now);
  boards[1]->heartbeat(now - 6 * kSecond);
  const std::string report = flight_report(*boards[0], waiting, now, 2.0);
  INFO(report);
  CHECK_THAT(report, Contains("flight recorder: rank 1 (rank 1 of 3 on 'world') is behind: its last collective there "
                              "is all_reduce #4 (1024 elements, call 4, done"));
  CHECK_THAT(report, Contains("it never called all_reduce #5, which rank 0, rank 2 wait in; it is in no communication "
                              "call; no sign of life for 6.0 s (stopped, frozen or dead)"));
  CHECK_THAT(report, !Contains("rank 0 (rank 0 of 3 on 'world') is behind") &&
                         !Contains("rank 2 (rank 2 of 3 on 'world') is behind"));
  CHECK_THAT(report, Contains("  rank 1: all_reduce #1") && Contains("  rank 2: all_reduce #2"));
}

TEST_CASE("flight report: a rank stopped inside the collective, a missing rank, a receive never matched", "[flight]") {
  auto boards = job_boards(3);
  const std::int64_t now = Watchdog::now_ns();
  for (auto& b : boards) b->heartbeat(now);
  SECTION("stopped inside the same collective: named by its silence") {
    FlightEntry& waiting = collectives(*boards[0], "world", 0, 3, 2, true);
    collectives(*boards[1], "world", 1, 3, 2, true, 9);
    collectives(*boards[2], "world", 2, 3, 2, true);
    boards[1]->heartbeat(now - 9 * kSecond);
    const std::string report = flight_report(*boards[0], waiting, now, 2.0);
    INFO(report);
    CHECK_THAT(report, Contains("flight recorder: rank 1 (rank 1 of 3 on 'world') stopped responding; it waits in "
                                "all_reduce #3 on 'world' for 9.0 s; no sign of life for 9.0 s"));
    CHECK_THAT(report, !Contains("is behind"));
  }
  SECTION("a rank that posted the collective but does not progress it (alive, in no call)") {
    FlightEntry& waiting = collectives(*boards[0], "world", 0, 3, 2, true);
    collectives(*boards[1], "world", 1, 3, 2, true);
    FlightEntry& busy = collectives(*boards[2], "world", 2, 3, 2, true);
    busy.armed_at_ns = 0;  // posted #3 (non-blocking), then went off computing
    const std::string report = flight_report(*boards[0], waiting, now, 2.0);
    INFO(report);
    CHECK_THAT(report, Contains("flight recorder: rank 2 (rank 2 of 3 on 'world') posted all_reduce #3 but is in no "
                                "communication call, so it cannot complete there (computing, or an endless loop), "
                                "while rank 0, rank 1 wait in it"));
    CHECK_THAT(report, !Contains("rank 1 (rank 1 of 3 on 'world') posted"));
  }
  SECTION("a rank with no record of the communicator") {
    FlightEntry& waiting = collectives(*boards[0], "world/0:0", 0, 3, 1, true);
    collectives(*boards[2], "world/0:0", 2, 3, 1, true);
    collectives(*boards[1], "world/0:1", 1, 3, 1, false);  // another communicator of the same size
    const std::string report = flight_report(*boards[0], waiting, now, 2.0);
    INFO(report);
    CHECK_THAT(report, Contains("flight recorder: rank 1 of 'world/0:0' left no record"));
    CHECK_THAT(report, Contains("no rank of 'world/0:0' is behind or silent"));
  }
  SECTION("a receive whose send never came") {
    FlightEntry& e0 = *boards[0]->claim();
    FlightEntry& e1 = *boards[1]->claim();
    FlightRecorder::end(e1, FlightRecorder::begin(e1, "world/1:0", 1, 2, CommOp::kSend, false, 64, 0));
    FlightRecorder::end(e0, FlightRecorder::begin(e0, "world/1:0", 0, 2, CommOp::kRecv, false, 64, 1));
    const std::uint64_t call = FlightRecorder::begin(e0, "world/1:0", 0, 2, CommOp::kRecv, false, 64, 1);
    e0.armed_op = static_cast<int>(CommOp::kRecv);
    e0.armed_peer = 1;
    e0.armed_call = call;
    e0.armed_at_ns = now - 6 * kSecond;
    const std::string report = flight_report(*boards[0], e0, now, 2.0);
    INFO(report);
    CHECK_THAT(report,
               Contains("flight recorder: rank 1 (rank 1 of 2 on 'world/1:0') has not made the send that rank 0's "
                        "recv from rank 1 waits for; its last call there is send to rank 0 (64 elements, "
                        "call 1, done"));
    CHECK_THAT(report, Contains("it is in no communication call"));
    CHECK_THAT(report, !Contains("no sign of life"));
  }
}

TEST_CASE("watchdog: the expiry message carries the flight recorder's last calls", "[flight]") {
  scalelab_test::ExpiryCapture expiry;
  {
    Watchdog dog(0.2, expiry.handler());
    auto slot = dog.register_slot(0, 1, 0);
    const std::uint64_t call = FlightRecorder::begin(*slot->entry, "world", 0, 1, CommOp::kBarrier, true, 0, -1);
    WatchScope stuck(slot.get(), CommOp::kBarrier, -1, call);
    expiry.wait();
    dog.unregister_slot(slot.get());
  }
  REQUIRE(expiry.fired());
  const std::string message = expiry.message();
  CHECK_THAT(message, Contains("rank 0 (rank 0 of 1 in its communicator): barrier did not complete within 0.2 s"));
  CHECK_THAT(message, Contains("\nflight recorder: no rank of 'world' is behind or silent"));
  CHECK_THAT(message, Contains("\nflight recorder: the last calls on 'world', oldest first:\n  rank 0: barrier #1 (0 "
                               "elements, call 1, not complete"));
}
