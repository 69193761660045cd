// A bump allocator over one existing buffer: hands out consecutive ranges, in the order asked.
// Every stage uses it to lay named tensors into one flat allocation (the parameter views of
// model/params.cpp, the activation and scratch buffers of the models, stage 03's staging, the
// GPU model's device buffers): the layout is then just the order of the take() calls, and
// used() says how much of the buffer they covered, which the callers check against what they
// allocated. It only does pointer arithmetic, so it works on device pointers too.
#pragma once

#include <cstddef>
#include <limits>

#include "core/error.hpp"

namespace scalelab {

template <typename T>
class Carver {
 public:
  // Carves from base; `capacity` elements (unchecked when left out, e.g. a view whose size the
  // caller knows by construction).
  explicit Carver(T* base, std::size_t capacity = std::numeric_limits<std::size_t>::max())
      : base_(base), capacity_(capacity) {}

  // The next n elements.
  T* take(std::size_t n) {
    SCALELAB_CHECK(n <= capacity_ - used_, "carving ", n, " elements from a buffer of ", capacity_, " with ", used_,
                   " already taken");
    T* r = base_ + used_;
    used_ += n;
    return r;
  }
  // Where the next take() starts.
  T* position() const { return base_ + used_; }
  std::size_t used() const { return used_; }
  // True when exactly the whole capacity was taken: a layout that adds up.
  bool used_all() const { return used_ == capacity_; }

 private:
  T* base_;
  std::size_t capacity_;
  std::size_t used_ = 0;
};

// The same take() that only counts: a layout written once as a template over its carver runs
// first with a Counter, to size the buffer, then with a Carver over it.
template <typename T>
struct Counter {
  std::size_t used = 0;
  T* take(std::size_t n) {
    used += n;
    return nullptr;
  }
};

}  // namespace scalelab
