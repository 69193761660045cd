// A small multi-rank job for the fault tests: ranks all-reduce in a loop, and one rank fails on
// purpose at step 3. run_fault_case.cmake launches it under mpiexec and checks that the whole
// job ends non-zero within 30 s and that its output names the failed rank.
//   comm_fault_job throw|kill|hang|stop|drop|grid [fail_rank]
//     throw  the rank throws: CommRuntime::run reports it and calls MPI_Abort
//     kill   the rank is killed (SIGKILL): mpirun notices and ends the job
//     hang   the rank sleeps forever: the others' watchdog (5 s here) ends the job
//     stop   the rank stops itself (SIGSTOP): the others' watchdog ends the job, and the flight
//            recorder names the silent rank (comm/flight_report.hpp)
//     drop   the rank drops the Request of a 4 MiB isend that no rank receives (the others are
//            busy for a minute): its destructor waits for the send, and the rank's own watchdog
//            ends the job, naming the send and its peer
//     grid   every rank builds a 2x2 grid on 3 ranks: the ConfigError ends the job
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "comm/grid.hpp"
#include "comm/ring.hpp"
#include "comm/runtime.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
  using namespace scalelab;
  const std::string mode = argc > 1 ? argv[1] : "";
  const int fail_rank = argc > 2 ? std::stoi(argv[2]) : 1;
  if (mode != "throw" && mode != "kill" && mode != "hang" && mode != "stop" && mode != "drop" && mode != "grid") {
    std::fprintf(stderr, "usage: comm_fault_job throw|kill|hang|stop|drop|grid [fail_rank]\n");
    return 2;
  }
  try {
    CommOptions options;
    options.timeout_seconds = 5;
    CommRuntime runtime(Backend::kMpi, options);
    return runtime.run([&](Communicator& world) {
      if (mode == "grid") {
        ProcessGrid grid(world, GridShape{1, 2, 2});
        return 0;
      }
      std::vector<float> x(1 << 16, 1.0f);
      for (int step = 0; step < 10; ++step) {
        if (world.rank() == fail_rank && step == 3) {
          if (mode == "throw") throw Error("deliberate failure at step " + std::to_string(step));
          if (mode == "kill") std::raise(SIGKILL);
          if (mode == "stop") std::raise(SIGSTOP);
          if (mode == "hang")
            for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
        }
        if (mode == "drop" && step == 3) {
          if (world.rank() == fail_rank) {
            // Above any eager limit, so the send completes only when a receive is posted.
            std::vector<float> message(1 << 20, 1.0f);
            world.isend(message.data(), message.size(), DataType::kFloat32, (fail_rank + 1) % world.size());
          } else {
            std::this_thread::sleep_for(std::chrono::seconds(60));  // busy: no watched call
          }
        }
        ring_all_reduce(world, x.data(), x.size());
        world.all_reduce(x.data(), x.size());
      }
      return 0;
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
