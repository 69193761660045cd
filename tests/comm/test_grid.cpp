// The [pp][dp][tp] process grid: coordinates with tp fastest, the three group splits on the
// test world (every factorisation of its size), and the error for a grid that does not fit; and
// the local rank a job's GPUs are handed out by.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/grid.hpp"
#include "comm/local_rank.hpp"
#include "core/error.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;
using Catch::Matchers::Contains;

TEST_CASE("grid coordinates: tp fastest, then dp, then pp (Megatron order)") {
  const GridShape s{2, 3, 4};  // pp, dp, tp
  CHECK(s.ranks() == 24);
  // Hand-computed corners: rank = (pp*dp_size + dp)*tp_size + tp.
  CHECK(grid_rank(s, {0, 0, 1}) == 1);
  CHECK(grid_rank(s, {0, 1, 0}) == 4);
  CHECK(grid_rank(s, {1, 0, 0}) == 12);
  CHECK(grid_rank(s, {1, 2, 3}) == 23);
  for (int rank = 0; rank < s.ranks(); ++rank) {
    const GridCoord c = grid_coord(s, rank);
    INFO("rank " << rank << " -> (pp " << c.pp << ", dp " << c.dp << ", tp " << c.tp << ")");
    CHECK(grid_rank(s, c) == rank);
    CHECK(c.tp == rank % 4);
  }
}

TEST_CASE("a grid whose product is not the world size is a ConfigError naming both") {
  CHECK_THROWS_AS(validate_grid({1, 2, 2}, 3), ConfigError);
  CHECK_THROWS_WITH(validate_grid({1, 2, 2}, 3), Contains("dp*tp*pp = 2*2*1 = 4 does not match the world size 3") &&
                                                     Contains("launch with mpirun -np 4") &&
                                                     Contains("whose product is 3"));
  CHECK_THROWS_WITH(validate_grid({1, 0, 1}, 1), Contains("dp: must be at least 1, got 0"));
  CHECK_THROWS_WITH(validate_grid({-1, 1, 1}, 1), Contains("pp: must be at least 1, got -1"));
  CHECK_NOTHROW(validate_grid({2, 3, 4}, 24));
}

TEST_CASE("every rank reports the same grid error") {
  Communicator& comm = test_world();
  const int n = comm.size();
  INFO(where(comm));
  std::int32_t threw = 0;
  try {
    ProcessGrid grid(comm, {1, n + 1, 1});
  } catch (const ConfigError& e) {
    threw = 1;
    CHECK_THAT(std::string(e.what()), Contains("does not match the world size " + std::to_string(n)));
  }
  comm.all_reduce(&threw, 1);
  CHECK(threw == n);
}

TEST_CASE("grid groups: every factorisation of the world size") {
  Communicator& comm = test_world();
  const int n = comm.size(), r = comm.rank();
  for (int pp = 1; pp <= n; ++pp)
    for (int dp = 1; dp <= n; ++dp) {
      if (n % (pp * dp) != 0) continue;
      const GridShape s{pp, dp, n / (pp * dp)};
      INFO(where(comm) << ", grid pp " << s.pp << " dp " << s.dp << " tp " << s.tp);
      ProcessGrid grid(comm, s);
      const GridCoord c = grid.coord();
      CHECK(grid_rank(s, c) == r);
      CHECK(grid.dp().size() == s.dp);
      CHECK(grid.tp().size() == s.tp);
      CHECK(grid.pp().size() == s.pp);
      CHECK(grid.dp().rank() == c.dp);
      CHECK(grid.tp().rank() == c.tp);
      CHECK(grid.pp().rank() == c.pp);
      // The members of each group, gathered in group order, are the world ranks the formula says.
      const auto check_members = [&](Communicator& group, auto member_at) {
        std::vector<std::int32_t> got(static_cast<std::size_t>(group.size()), -1);
        std::int32_t mine = r;
        group.all_gather(&mine, got.data(), got.size(), DataType::kInt32);
        for (int k = 0; k < group.size(); ++k) CHECK(got[static_cast<std::size_t>(k)] == member_at(k));
      };
      check_members(grid.dp(), [&](int k) { return grid_rank(s, {c.pp, k, c.tp}); });
      check_members(grid.tp(), [&](int k) { return grid_rank(s, {c.pp, c.dp, k}); });
      check_members(grid.pp(), [&](int k) { return grid_rank(s, {k, c.dp, c.tp}); });
    }
}

TEST_CASE("the local rank counts the ranks before this one on the same host, in the world and in a group") {
  // Every rank of the test world runs on this one machine, so the local rank is the rank; in a
  // group (the even and the odd ranks) it is the rank in the group, which is why the GPU is chosen
  // once from the world's (comm/local_rank.hpp).
  Communicator& world = test_world();
  INFO(where(world));
  CHECK(local_rank_on_host(world) == world.rank());
  std::unique_ptr<Communicator> half = world.split(world.rank() % 2, world.rank());
  CHECK(local_rank_on_host(*half) == half->rank());
  CHECK(half->rank() == world.rank() / 2);
  CHECK(this_host_name() != "");
}
