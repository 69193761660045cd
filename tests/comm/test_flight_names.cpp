// The flight recorder on the MPI world (test_comm_mpi): every rank numbers a communicator's
// collectives alike and names a split's children alike, which is what lets one rank's records
// be compared with another's when the job is stuck (comm/flight_report.hpp).
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/flight_recorder.hpp"
#include "world.hpp"

using namespace scalelab;
using scalelab_test::test_world;
using scalelab_test::where;

namespace {
// The split number in a child's name "<parent>/<number>:<color>".
long split_number(const std::string& child, const std::string& parent) {
  const std::string rest = child.substr(parent.size() + 1);
  return std::stol(rest.substr(0, rest.find(':')));
}
}  // namespace

TEST_CASE("flight recorder: collectives numbered alike on every rank, split children named alike", "[flight]") {
  Communicator& world = test_world();
  REQUIRE(world.watch_slot() != nullptr);  // the MPI test main runs a watchdog
  const FlightEntry& entry = *world.watch_slot()->entry;
  INFO(where(world));
  CHECK(world.name() == "world");
  float x = 1;
  world.all_reduce(&x, 1);
  world.barrier();
  const auto posted = static_cast<std::int64_t>(entry.collectives.load());
  CHECK(std::string(entry.name) == "world");
  CHECK(static_cast<std::int64_t>(entry.collectives_done.load()) == posted);
  // The same count on every rank: the max and the min over the ranks agree with this rank's.
  std::int64_t most = posted, least = posted;
  world.all_reduce(&most, 1, ReduceOp::kMax);
  world.all_reduce(&least, 1, ReduceOp::kMin);
  CHECK(most == posted);
  CHECK(least == posted);
  CHECK(static_cast<std::int64_t>(entry.collectives.load()) == posted + 2);  // the two just made

  const int color = world.rank() % 2;
  auto a = world.split(color, world.rank());
  auto b = world.split(color, world.rank());
  const std::string prefix = "world/";
  REQUIRE(a->name().rfind(prefix, 0) == 0);
  std::string suffix = ":";  // appended, not ":" + ...: GCC 12's -Wrestrict false positive
  suffix += std::to_string(color);
  CHECK(a->name().substr(a->name().find(':')) == suffix);
  const long n = split_number(a->name(), "world");
  CHECK(split_number(b->name(), "world") == n + 1);
  long high = n, low = n;
  world.all_reduce(&high, 1, ReduceOp::kMax);
  world.all_reduce(&low, 1, ReduceOp::kMin);
  CHECK(high == n);
  CHECK(low == n);
  // A grandchild extends its parent's name.
  auto c = a->split(0, a->rank());
  CHECK(c->name() == a->name() + "/0:0");
  CHECK(c->watch_slot()->entry != a->watch_slot()->entry);
}

TEST_CASE("flight recorder: a send whose Request is dropped before its wait is recorded complete", "[flight]") {
  Communicator& world = test_world();
  Watchdog::Slot* slot = world.watch_slot();
  REQUIRE(slot != nullptr);  // the MPI world has a watchdog
  std::vector<float> x(16, 1.5f), y(16, 0.0f);
  Request recv = world.irecv(y.data(), y.size(), DataType::kFloat32, world.rank(), 7);
  std::uint64_t send_call = 0;
  {
    Request send = world.isend(x.data(), x.size(), DataType::kFloat32, world.rank(), 7);
    send_call = slot->entry->calls;  // the send is the newest call
  }                                  // dropped: the backend waits for the send, and the recorder marks it done
  world.wait(recv);
  const FlightRecord& r = slot->entry->ring[send_call % kFlightRing];
  INFO(where(world) << ": the dropped send is call " << send_call);
  REQUIRE(r.call == send_call);
  CHECK(r.ended_ns != 0);
  CHECK(y == x);
}
