// The process grid (stage 04; used by stages 05-07): world ranks arranged as [pp][dp][tp] with
// tp fastest (Megatron's order), so the ranks of one tensor-parallel group are neighbours (on a
// cluster, the same node) and pipeline stages are farthest apart:
//
//   world rank = (pp_index * dp + dp_index) * tp + tp_index
//
// Each rank belongs to one dp group (same pp and tp index), one tp group (same pp and dp index)
// and one pp group (same dp and tp index); the grid makes them with world.split().
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.hpp"

namespace scalelab {

struct GridShape {
  int pp = 1;
  int dp = 1;
  int tp = 1;
  int ranks() const { return pp * dp * tp; }
};

struct GridCoord {
  int pp = 0;
  int dp = 0;
  int tp = 0;
};

int grid_rank(const GridShape& shape, const GridCoord& c);
GridCoord grid_coord(const GridShape& shape, int rank);
// Throws ConfigError unless every size is >= 1 and pp*dp*tp equals the world size; the message
// names the sizes, their product, the world size and the fix. Every rank checks, so every rank
// reports the same error.
void validate_grid(const GridShape& shape, int world_size);

class ProcessGrid {
 public:
  // Collective over world: splits it into this rank's dp, tp and pp groups.
  ProcessGrid(Communicator& world, const GridShape& shape);

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  Communicator& world() { return world_; }
  Communicator& dp() { return *dp_; }
  Communicator& tp() { return *tp_; }
  Communicator& pp() { return *pp_; }

 private:
  Communicator& world_;
  GridShape shape_;
  GridCoord coord_;
  std::unique_ptr<Communicator> dp_, tp_, pp_;
};

}  // namespace scalelab
