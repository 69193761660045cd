// `scalelab schedule`: the chart, the per-rank table and the bubble for a good schedule; exit
// status 2 and the setting's message for a bad one.
#include <catch2/catch.hpp>

#include <string>

#include "cli_run.hpp"

using scalelab_test::CliResult;
using scalelab_test::run_cli;

TEST_CASE("scalelab schedule prints one row per rank, the formulas and the bubble", "[cli]") {
  const CliResult r = run_cli("schedule --pp 4 --micro-batches 8 --schedule 1f1b");
  INFO(r.output);
  REQUIRE(r.status == 0);
  // F = B = W = 1, two columns per unit: rank 3 never waits after its first forward.
  CHECK(r.output.find("rank 3 |......F0B000F1B111F2B222F3B333F4B444F5B555F6B666F7B777............|") !=
        std::string::npos);
  CHECK(r.output.find("rank 0 |F0F1F2F3............B000F4B111") != std::string::npos);
  // rank 0: 3 warm-up forwards + the steady state's first; 4 micro-batches in flight at most.
  CHECK(r.output.find("0      4 (4)") != std::string::npos);
  CHECK(r.output.find("4 (4)") != std::string::npos);
  // (p - 1) / (m + p - 1) = 3 / 11
  CHECK(r.output.find("bubble simulated 0.272727, formula 0.272727") != std::string::npos);

  const CliResult zb = run_cli("schedule --pp 4 --micro-batches 8 --schedule zb-h1 --width 54");
  INFO(zb.output);
  REQUIRE(zb.status == 0);
  CHECK(zb.output.find("rank 3 |......F0B0F1B1F2B2F3B3W0F4B4W1F5B5W2F6B6W3F7B7W4W5W6W7|") != std::string::npos);
  CHECK(zb.output.find("bubble simulated 0.111111, formula 0.111111") != std::string::npos);  // 3 / 27

  const CliResult il = run_cli("schedule --pp 4 --micro-batches 8 --schedule interleaved:2");
  INFO(il.output);
  REQUIRE(il.status == 0);
  CHECK(il.output.find("bubble simulated 0.157895, formula 0.157895") != std::string::npos);  // 3 / 19
  // Under NCCL's rules (schedule/rendezvous.hpp) 1f1b runs as built; interleaved with m > p would
  // hang as built and runs with its stuck sends delayed: the last lines say which.
  CHECK(r.output.find("over NCCL (no tags, sends wait for their receive): the lists run as built, in ") !=
        std::string::npos);
  CHECK(il.output.find("over NCCL (no tags, sends wait for their receive): as built, pipeline schedule "
                       "interleaved:2 deadlocks") != std::string::npos);
  CHECK(il.output.find("with the stuck sends delayed into the next group (scalelab train --backend nccl) they run, "
                       "in ") != std::string::npos);
}

TEST_CASE("scalelab schedule rejects bad settings with exit status 2 and the message", "[cli]") {
  struct Case {
    const char* args;
    const char* message;
  };
  const Case cases[] = {
      {"schedule --schedule pipedream", "error: schedule: unknown schedule 'pipedream'; use --schedule afab"},
      {"schedule --schedule interleaved", "write interleaved:V"},
      {"schedule --schedule interleaved:1", "interleaved needs V >= 2 model chunks per rank, got 1"},
      {"schedule --pp 4 --micro-batches 6 --schedule interleaved:2",
       "error: micro_batches: interleaved needs --micro-batches to be a multiple of --pp 4, got 6"},
      {"schedule --pp 0", "error: pp: must be at least 1, got 0"},
      {"schedule --forward-cost 0", "error: costs: forward and backward costs must be positive"},
  };
  for (const auto& c : cases) {
    const CliResult r = run_cli(c.args);
    INFO("scalelab " << c.args << "\n  exit status " << r.status << "\n  output: " << r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
}
