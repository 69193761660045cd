// Ranks started with different options (parallel/same_options.hpp), under mpiexec in
// test_ddp_mpi: every rank must throw the same ConfigError, naming the first rank that differs
// and how, before any grid exists. One rank cannot differ from itself.
#include <catch2/catch.hpp>

#include <string>

#include "core/error.hpp"
#include "parallel/same_options.hpp"
#include "world.hpp"

using namespace scalelab;
using scalelab_test::test_world;
using scalelab_test::where;

TEST_CASE("ranks started with different options all fail with one message naming the first", "[same_options]") {
  Communicator& world = test_world();
  INFO(where(world));
  TrainOptions o;
  CHECK_NOTHROW(check_same_options(world, o));  // alike: nothing to say
  if (world.size() < 2) return;
  // Rank 1 and the last rank differ: rank 1 in --tp and --seed, the last rank in --seed. The
  // options are listed in the JSON's (sorted) order.
  const int last = world.size() - 1;
  if (world.rank() == 1) o.parallel.tp = 2;
  if (world.rank() == 1 || world.rank() == last) o.seed = 99;
  const std::string others = world.size() > 2 ? " (and 1 other rank(s))" : "";
  CHECK_THROWS_MATCHES(check_same_options(world, o), ConfigError,
                       Catch::Message(
                           "options: rank 1" + others +
                           " was started with different options than rank 0: parallel.tp is 2 there and 1 on "
                           "rank 0, seed is 99 there and 1337 on rank 0; start every rank with the same "
                           "options (one command line for mpirun -np N)"));
  // The communicator still works afterwards: every rank left the check at the same point.
  int one = 1;
  world.all_reduce(&one, 1);
  CHECK(one == world.size());
}
