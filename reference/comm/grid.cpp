// The [pp][dp][tp] grid: rank <-> coordinates and the three group splits.
#include "comm/grid.hpp"

#include "core/error.hpp"

namespace scalelab {

int grid_rank(const GridShape& s, const GridCoord& c) { return (c.pp * s.dp + c.dp) * s.tp + c.tp; }

GridCoord grid_coord(const GridShape& s, int rank) {
  GridCoord c;
  c.tp = rank % s.tp;
  c.dp = (rank / s.tp) % s.dp;
  c.pp = rank / (s.tp * s.dp);
  return c;
}

void validate_grid(const GridShape& s, int world_size) {
  const auto check_size = [](int v, const char* name) {
    require(v >= 1, name, "must be at least 1, got " + std::to_string(v), "use 1 to turn this dimension off");
  };
  check_size(s.dp, "dp");
  check_size(s.tp, "tp");
  check_size(s.pp, "pp");
  const std::string sizes = "dp*tp*pp = " + std::to_string(s.dp) + "*" + std::to_string(s.tp) + "*" +
                            std::to_string(s.pp) + " = " + std::to_string(s.ranks());
  require(s.ranks() == world_size, "dp*tp*pp",
          sizes + " does not match the world size " + std::to_string(world_size) + " (the ranks mpirun started)",
          "launch with mpirun -np " + std::to_string(s.ranks()) + ", or choose dp, tp and pp whose product is " +
              std::to_string(world_size));
}

ProcessGrid::ProcessGrid(Communicator& world, const GridShape& shape) : world_(world), shape_(shape) {
  validate_grid(shape, world.size());
  coord_ = grid_coord(shape, world.rank());
  const GridCoord& c = coord_;
  // Colors name the group (the two coordinates that stay fixed); keys order ranks within it.
  dp_ = world.split(c.pp * shape.tp + c.tp, c.dp);
  tp_ = world.split(c.pp * shape.dp + c.dp, c.tp);
  pp_ = world.split(c.dp * shape.tp + c.tp, c.pp);
}

}  // namespace scalelab
