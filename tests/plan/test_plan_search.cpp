// The planner's search: its rules, its ranking, the bubble it uses, and its messages.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "plan/planner.hpp"

using namespace scalelab;
using Catch::Matchers::Contains;

namespace {
PlanRequest request(const std::string& model, int nodes) {
  PlanRequest q;
  q.model = plan_model_by_name(model);
  q.cluster = cluster_preset("h100-sxm");
  q.cluster.nodes = nodes;
  q.global_batch = 512;
  return q;
}
}  // namespace

TEST_CASE("every layout obeys the rules, and the ranking puts the fitting ones first, fastest first", "[plan]") {
  const PlanRequest q = request("gpt2-1.5b", 2);
  const std::vector<PlanResult> results = plan_layouts(q);
  REQUIRE(!results.empty());
  bool seen_unfit = false;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const PlanResult& r = results[i];
    const PlanLayout& l = r.layout;
    INFO(l.describe());
    CHECK(l.world() == q.cluster.world());
    CHECK(l.dp * l.micro_batches * l.micro_rows == q.global_batch);
    CHECK(q.model.config.num_heads % l.tp == 0);
    CHECK(l.tp <= q.cluster.gpus_per_node);
    CHECK((l.pp == 1 || l.zero <= 1));
    CHECK((l.zero == 0 || l.dp > 1));
    CHECK(l.attention == AttentionKind::kFlash);                     // the request's default
    CHECK(l.checkpoint.kind != CheckpointPolicy::Kind::kSelective);  // nothing to recompute under flash
    CHECK(r.fits == (r.memory.total() <= q.cluster.memory_bytes));
    if (!r.fits) seen_unfit = true;
    CHECK(!(seen_unfit && r.fits));  // no fitting layout after an unfitting one
    if (i > 0 && r.fits) CHECK(results[i - 1].time.step_s <= r.time.step_s * (1 + 1e-9));
    if (!r.fits) CHECK_THAT(r.overflow, Contains("GiB"));
  }
}

TEST_CASE("the pipeline bubble is (p-1)/(m+p-1) for 1F1B and a v-th of it interleaved", "[plan]") {
  PlanRequest q = request("gpt2-1.5b", 2);
  q.pp = 4;
  q.micro_batches = 8;
  for (const PlanResult& r : plan_layouts(q)) {
    const double p = 4, m = 8;
    INFO(r.layout.describe() << ": bubble " << r.time.bubble);
    if (r.layout.schedule == "1f1b") CHECK(r.time.bubble == Approx((p - 1) / (m + p - 1)));
    if (r.layout.schedule == "interleaved:2") CHECK(r.time.bubble == Approx((p - 1) / (2 * m + p - 1)));
    if (r.layout.schedule == "zb-h1") CHECK(r.time.bubble < (p - 1) / (m + p - 1));
  }
}

TEST_CASE("ZeRO shrinks the model states per rank as its formulas say, in a real search", "[plan]") {
  PlanRequest q = request("gpt2-124m", 1);
  q.tp = 1;
  q.pp = 1;
  q.micro_batches = 1;
  q.checkpoint = "none";
  double before = 1e300;
  for (int zero = 0; zero <= 3; ++zero) {
    q.zero = zero;
    const std::vector<PlanResult> results = plan_layouts(q);
    REQUIRE(results.size() == 1);
    INFO("stage " << zero << ": " << results[0].memory.model_states() << " bytes");
    CHECK(results[0].memory.model_states() < before);
    before = results[0].memory.model_states();
  }
}

TEST_CASE("bad requests name the flag and the fix", "[plan]") {
  CHECK_THROWS_WITH(plan_model_by_name("gpt5"), Contains("model: unknown model 'gpt5'") && Contains("gpt2-124m"));
  CHECK_THROWS_WITH(cluster_preset("tpu"), Contains("cluster: unknown preset 'tpu'") && Contains("h100-sxm"));
  PlanRequest q = request("gpt2-124m", 1);
  q.precision = "fp8";
  CHECK_THROWS_WITH(plan_layouts(q), Contains("precision: unknown precision 'fp8'"));
  q = request("gpt2-124m", 1);
  q.tp = 5;
  CHECK_THROWS_WITH(plan_layouts(q), Contains("layout:") && Contains("relax --dp/--tp/--pp"));
  q = request("gpt2-124m", 1);
  q.cluster.efficiency = 2;
  CHECK_THROWS_WITH(plan_layouts(q), Contains("efficiency") && Contains("(0, 1]"));
  q = request("gpt2-124m", 1);
  q.attention = "sparse";
  CHECK_THROWS_WITH(plan_layouts(q), Contains("--attention") && Contains("flash"));
  q = request("gpt2-124m", 1);
  q.global_batch = 0;
  CHECK_THROWS_WITH(plan_layouts(q), Contains("batch: must be >= 1"));
}
