// Stage 05 with stage 06: the micro-batches in flight of a tensor-parallel shard (fp32,
// dist/tp_model.hpp, or mixed precision, dist/tp_mixed_model.hpp). One forward's saved state is a
// movable `Saved` with its `buffer`, its `dims` (TpDims) and the weight-gradient `tape` of ZB-H1's
// input pass; it moves aside under a key and comes back whole. The buffers move with it, so every
// pointer into them (the tape's recorded inputs) stays valid.
#pragma once

#include <cstddef>
#include <map>
#include <utility>

#include "core/error.hpp"
#include "dist/tp_block.hpp"

namespace scalelab {

template <typename Saved>
class TpInFlight {
 public:
  // `current` (the last forward's) moves aside under `key`; `current` is left empty.
  void stash(Saved& current, int key) {
    SCALELAB_CHECK(current.buffer.size() > 0, "stash_activations(", key, ") with no forward to stash");
    SCALELAB_CHECK(!saved_.count(key), "activations of key ", key, " are already stashed");
    saved_[key] = std::move(current);
    current = Saved{};
  }
  // `key`'s state back into `current`, which must hold no deferred weight gradients; its shape
  // must be `dims`' (the shard's buffers are laid out for it).
  void restore(Saved& current, int key, const TpDims& dims) {
    const auto it = saved_.find(key);
    SCALELAB_CHECK(it != saved_.end(), "no activations stashed under key ", key);
    SCALELAB_CHECK(it->second.dims.B == dims.B && it->second.dims.T == dims.T, "stashed activations of another shape");
    SCALELAB_CHECK(current.tape.empty(), "activations replaced while their weight gradients are still deferred");
    current = std::move(it->second);
    saved_.erase(it);
  }
  // `current` freed, unless its weight gradients are still deferred (an error).
  static void release(Saved& current) {
    SCALELAB_CHECK(current.tape.empty(), "activations released while their weight gradients are still deferred");
    current = Saved{};
  }
  std::size_t size() const { return saved_.size(); }

 private:
  std::map<int, Saved> saved_;
};

}  // namespace scalelab
