// The bucket plan: whole tensors, contiguous, covering the flat buffer exactly once, in the
// reverse of the layout order (the order backward finishes them), the first bucket small.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "dist/ddp.hpp"

using namespace scalelab;

TEST_CASE("buckets cover the gradient buffer in backward order, whole tensors, capped", "[graded][ddp_buckets]") {
  const ParamLayout layout(gpt_config_by_name("mini"));
  const std::size_t first_cap = 64 << 10, cap = 1 << 20;
  const auto buckets = plan_buckets(layout, first_cap, cap);
  REQUIRE(buckets.size() > 2);
  // Launch order runs from the end of the buffer to its start, without gaps or overlaps.
  CHECK(buckets.front().second == layout.num_params());
  CHECK(buckets.back().first == 0);
  for (std::size_t i = 1; i < buckets.size(); ++i) {
    INFO("bucket " << i << " = [" << buckets[i].first << ", " << buckets[i].second << ") must end where bucket "
                   << i - 1 << " begins (" << buckets[i - 1].first << ")");
    CHECK(buckets[i].second == buckets[i - 1].first);
  }
  // Every boundary is a tensor boundary.
  std::vector<std::size_t> starts;
  for (const auto& t : layout.tensors()) starts.push_back(t.offset);
  for (const auto& [b, e] : buckets) {
    INFO("bucket [" << b << ", " << e << ") starts inside a tensor");
    CHECK(std::find(starts.begin(), starts.end(), b) != starts.end());
  }
  // Sizes: a bucket closes as soon as it reaches its cap, so it is at most cap plus one tensor;
  // the first one uses the small cap.
  std::size_t largest_tensor = 0;
  for (const auto& t : layout.tensors()) largest_tensor = std::max(largest_tensor, t.numel * 4);
  const std::size_t first_bytes = (buckets[0].second - buckets[0].first) * 4;
  INFO("first bucket " << first_bytes << " bytes, cap " << first_cap);
  CHECK(first_bytes < first_cap + largest_tensor);
  CHECK(first_bytes < (buckets[1].second - buckets[1].first) * 4);
  for (std::size_t i = 1; i + 1 < buckets.size(); ++i) {
    const std::size_t bytes = (buckets[i].second - buckets[i].first) * 4;
    INFO("bucket " << i << ": " << bytes << " bytes");
    CHECK(bytes >= cap);
    CHECK(bytes < cap + largest_tensor);
  }
  // One huge cap: a small first bucket, then everything else in one.
  CHECK(plan_buckets(layout, first_cap, std::size_t(1) << 40).size() == 2);
}

// The edges of "closes as soon as it reaches its cap": a bucket exactly at its cap closes (as
// PyTorch's DDP does), and a plan whose last bucket closed at offset 0 adds no empty one.
TEST_CASE("a bucket at exactly its cap closes, and no bucket is empty", "[graded][ddp_buckets]") {
  const ParamLayout layout(gpt_config_by_name("mini"));
  const auto& tensors = layout.tensors();
  const std::size_t last_bytes = tensors.back().numel * sizeof(float);  // the first tensor backward finishes
  {
    const auto exact = plan_buckets(layout, last_bytes, std::size_t(1) << 40);
    REQUIRE(!exact.empty());
    INFO("first cap = the last tensor's " << last_bytes << " bytes: the first bucket is that tensor alone, got ["
                                          << exact.front().first << ", " << exact.front().second << ")");
    CHECK(exact.front() == std::make_pair(tensors.back().offset, layout.num_params()));
  }
  // A 1-byte cap: every tensor reaches it alone, so one bucket per tensor, the last ending at 0.
  const auto single = plan_buckets(layout, 1, 1);
  INFO("caps of 1 byte: " << single.size() << " buckets for " << tensors.size() << " tensors");
  CHECK(single.size() == tensors.size());
  for (std::size_t i = 0; i < single.size(); ++i) {
    INFO("bucket " << i << " = [" << single[i].first << ", " << single[i].second << ")");
    CHECK(single[i].first < single[i].second);
  }
}

TEST_CASE("ddp options are parsed or rejected clearly", "[ddp_options]") {
  CHECK(DdpOptions::parse_mode("naive") == DdpOptions::Mode::kNaive);
  CHECK(DdpOptions::parse_algorithm("ring") == DdpOptions::Algorithm::kRing);
  CHECK_THROWS_WITH(DdpOptions::parse_mode("fast"), Catch::Contains("ddp: unknown mode 'fast'; use naive or bucketed"));
  CHECK_THROWS_WITH(DdpOptions::parse_algorithm("tree"),
                    Catch::Contains("allreduce: unknown algorithm 'tree'; use builtin"));
  const ParamLayout layout(gpt_config_by_name("tiny"));
  CHECK_THROWS_WITH(plan_buckets(layout, 0, 10), Catch::Contains("bucket_bytes: must be positive"));
}
