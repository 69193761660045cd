// The memory tracker's bookkeeping and its report.
#include "core/memory.hpp"

#include <algorithm>
#include <cstdio>

#include "core/error.hpp"

namespace scalelab {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParams: return "params";
    case MemCategory::kGrads: return "grads";
    case MemCategory::kOptimizer: return "optimizer";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kComm: return "comm";
    case MemCategory::kWorkspace: return "workspace";
    case MemCategory::kCount: break;
  }
  return "?";
}

void MemoryTracker::on_alloc(MemCategory c, std::size_t bytes) {
  current_[idx(c)] += bytes;
  peak_[idx(c)] = std::max(peak_[idx(c)], current_[idx(c)]);
  current_total_ += bytes;
  peak_total_ = std::max(peak_total_, current_total_);
}

void MemoryTracker::on_free(MemCategory c, std::size_t bytes) {
  SCALELAB_CHECK(current_[idx(c)] >= bytes, "freeing more ", mem_category_name(c), " bytes than allocated");
  current_[idx(c)] -= bytes;
  current_total_ -= bytes;
}

void MemoryTracker::reset_peaks() {
  peak_ = current_;
  peak_total_ = current_total_;
}

std::string MemoryTracker::report() const {
  std::string out = "category        current MiB     peak MiB      peak bytes\n";
  char line[128];
  auto row = [&](const char* name, std::size_t cur, std::size_t pk) {
    std::snprintf(line, sizeof line, "%-12s %14.3f %12.3f %15zu\n", name, cur / 1048576.0, pk / 1048576.0, pk);
    out += line;
  };
  for (int i = 0; i < kMemCategoryCount; ++i)
    row(mem_category_name(static_cast<MemCategory>(i)), current_[i], peak_[i]);
  row("total", current_total_, peak_total_);
  return out;
}

}  // namespace scalelab
