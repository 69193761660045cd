// Pieces that need no MPI: the block partition and its traffic formulas, the one-rank
// communicator's self-messages, the watchdog, and the runtime's backend choice.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "comm/local_communicator.hpp"
#include "comm/runtime.hpp"
#include "comm/watchdog.hpp"
#include "core/error.hpp"
#include "expiry_capture.hpp"

using namespace scalelab;
using Catch::Matchers::Contains;

TEST_CASE("block partition: contiguous, covers the buffer, sizes differ by at most one") {
  for (int n = 1; n <= 9; ++n)
    for (std::size_t count : {0, 1, 2, 7, 8, 9, 63, 1000003}) {
      const BlockPartition p{count, n};
      INFO(n << " ranks, " << count << " elements");
      std::size_t next = 0, smallest = count, largest = 0;
      for (int b = 0; b < n; ++b) {
        CHECK(p.offset(b) == next);
        next += p.size(b);
        smallest = std::min(smallest, p.size(b));
        largest = std::max(largest, p.size(b));
      }
      CHECK(next == count);
      CHECK(largest - smallest <= 1);
      CHECK(p.size(0) == largest);  // the ring sizes its scratch by block 0
    }
}

TEST_CASE("ring traffic: the textbook volumes when n divides the count, n-1 crossings per block always") {
  for (int n = 1; n <= 8; ++n) {
    const std::size_t even = 12 * static_cast<std::size_t>(n);
    for (int r = 0; r < n; ++r) {
      INFO(n << " ranks, rank " << r);
      CHECK(ring_reduce_scatter_traffic(even, r, n).sent * n == (n - 1) * even);
      CHECK(ring_all_gather_traffic(even, r, n).received * n == (n - 1) * even);
      CHECK(ring_all_reduce_traffic(even, r, n).sent * n == 2 * (n - 1) * even);
    }
    for (std::size_t count : {1, 5, 1000003}) {
      std::size_t rs = 0, ag = 0;
      for (int r = 0; r < n; ++r) {
        rs += ring_reduce_scatter_traffic(count, r, n).sent;
        ag += ring_all_gather_traffic(count, r, n).received;
      }
      CHECK(rs == (n - 1) * count);
      CHECK(ag == (n - 1) * count);
    }
  }
}

TEST_CASE("one-rank communicator: self-messages match by tag in posting order") {
  LocalCommunicator comm;
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  int a = 1, b = 2, c = 3, got1 = 0, got2 = 0, got3 = 0;
  comm.send(&a, 1, DataType::kInt32, 0, 5);
  comm.send(&b, 1, DataType::kInt32, 0, 6);
  Request r3 = comm.irecv(&got3, 1, DataType::kInt32, 0, 5);  // waits for a later tag-5 send
  comm.send(&c, 1, DataType::kInt32, 0, 5);
  comm.recv(&got2, 1, DataType::kInt32, 0, 6);
  comm.wait(r3);
  (void)got1;
  CHECK(got3 == 1);  // the first tag-5 message was already queued when r3 was posted
  CHECK(got2 == 2);
  comm.recv(&got1, 1, DataType::kInt32, 0, 5);
  CHECK(got1 == 3);
  CHECK(comm.stats()[CommOp::kSend].bytes_sent == 12);
  CHECK(comm.stats()[CommOp::kRecv].bytes_received == 12);
}

TEST_CASE("receives in flight: counted at each irecv until its wait, a test that says done, or its drop") {
  LocalCommunicator comm;
  int v[4] = {1, 2, 3, 4}, got[4] = {};
  Request r0 = comm.irecv(&got[0], 1, DataType::kInt32, 0, 0);
  Request r1 = comm.irecv(&got[1], 1, DataType::kInt32, 0, 1);
  CHECK(comm.stats().peak_recvs_in_flight() == 2);
  for (int tag = 0; tag < 4; ++tag) comm.send(&v[tag], 1, DataType::kInt32, 0, tag);
  comm.wait(r0);
  CHECK(comm.test(r1));
  comm.stats().reset();
  CHECK(comm.stats().peak_recvs_in_flight() == 0);
  {
    Request r2 = comm.irecv(&got[2], 1, DataType::kInt32, 0, 2);
    CHECK(comm.stats().peak_recvs_in_flight() == 1);  // r0 and r1 are complete
  }                                                   // r2 dropped: complete too
  Request r3 = comm.irecv(&got[3], 1, DataType::kInt32, 0, 3);
  Request r4 = comm.irecv(&got[0], 1, DataType::kInt32, 0, 9);  // nothing will match it
  CHECK(comm.stats().peak_recvs_in_flight() == 2);              // r3 and r4, not r2
  comm.wait(r3);
  CHECK(got[1] == 2);
  CHECK(got[2] == 3);
  CHECK(got[3] == 4);
  CHECK_THROWS_WITH(comm.wait(r4), Contains("no matching send"));
  comm.stats().reset();
  CHECK(comm.stats().peak_recvs_in_flight() == 0);
}

TEST_CASE("one-rank communicator: a receive nothing will match fails instead of hanging") {
  LocalCommunicator comm;
  int x = 0;
  CHECK_THROWS_WITH(comm.recv(&x, 1, DataType::kInt32, 0, 9), Contains("no matching send") && Contains("tag 9"));
  double big[4] = {};
  comm.send(big, 4, DataType::kFloat64, 0, 1);
  CHECK_THROWS_WITH(comm.recv(&x, 1, DataType::kInt32, 0, 1), Contains("does not fit"));
}

TEST_CASE("one-rank communicator: collectives are copies, split gives another one-rank communicator") {
  LocalCommunicator comm;
  std::vector<float> in{1, 2, 3}, out(3);
  comm.all_reduce(in.data(), out.data(), 3, DataType::kFloat32, ReduceOp::kSum);
  CHECK(out == in);
  std::vector<float> g(3);
  comm.all_gather(in.data(), g.data(), 3, DataType::kFloat32);
  CHECK(g == in);
  auto sub = comm.split(0, 0);
  CHECK(sub->size() == 1);
  CHECK(std::string(sub->backend()) == "local");
  CHECK(comm.stats()[CommOp::kAllReduce].bytes_sent == 0);  // nothing crosses a wire with one rank
}

TEST_CASE("watchdog: a blocking call armed past the limit ends the job with a message naming the rank") {
  scalelab_test::ExpiryCapture expiry;
  {
    Watchdog dog(0.2, expiry.handler());
    auto slot = dog.register_slot(2, 4, 6);
    {
      WatchScope quick(slot.get(), CommOp::kAllReduce, -1);  // disarmed well before the limit
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    CHECK_FALSE(expiry.fired());
    WatchScope stuck(slot.get(), CommOp::kRecv, 1);
    expiry.wait();
    dog.unregister_slot(slot.get());
  }
  REQUIRE(expiry.fired());
  CHECK_THAT(expiry.message(),
             Contains("rank 6 (rank 2 of 4 in its communicator): recv from rank 1 did not complete within "
                      "0.2 s"));
  CHECK_THROWS_WITH(Watchdog(-1, [](const std::string&) {}), Contains("comm timeout: must be positive"));
}

TEST_CASE("runtime: backend names, and a one-rank run rethrows so main() reports it") {
  CHECK(parse_backend("local") == Backend::kLocal);
  CHECK(parse_backend("auto") == Backend::kAuto);
  CHECK_THROWS_WITH(parse_backend("gloo"), Contains("unknown backend 'gloo'") && Contains("auto, local or mpi"));
  CommRuntime runtime(Backend::kLocal, CommOptions{});
  CHECK(runtime.world().size() == 1);
  CHECK(runtime.run([](Communicator& w) { return w.rank() + 5; }) == 5);
  CHECK_THROWS_WITH(runtime.run([](Communicator&) -> int { throw ConfigError("dp: bad"); }), Contains("dp: bad"));
}
