// The CPU emulation's stand-in for CUDA's <cooperative_groups.h> (tests/simt/): the part of
// thread block clusters this kit's kernels use (the LayerNorm backward's sums across a cluster),
// on top of simt.hpp's launch with a cluster size.
#pragma once

#include "simt.hpp"

namespace cooperative_groups {

class cluster_group {
 public:
  // Every thread of every block of the cluster meets here; shared-memory writes before it are
  // seen by all after it.
  void sync() const { scalelab::simt::sync_cluster(); }
  // This block's rank in its cluster, 0 .. blocks - 1 (x fastest).
  unsigned block_rank() const { return scalelab::simt::cluster_block_rank(); }
  // The address in block `rank`'s shared memory at p's offset in this block's.
  template <typename T>
  T* map_shared_rank(T* p, unsigned rank) const {
    return static_cast<T*>(scalelab::simt::map_shared_rank(p, rank));
  }
};

inline cluster_group this_cluster() { return {}; }

}  // namespace cooperative_groups
