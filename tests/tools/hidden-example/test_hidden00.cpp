// A hidden test (kept outside the repository): residual_backward adds dout to both inputs.
#include <catch2/catch.hpp>
#include <vector>
#include "compare.hpp"
#include "model/layers/residual.hpp"

TEST_CASE("hidden: residual_backward accumulates dout into both inputs", "[graded][hidden_residual]") {
  std::vector<float> da(5, 1.0f), db(5, 2.0f), dout = {1, 2, 3, 4, 5};
  scalelab::residual_backward(da.data(), db.data(), dout.data(), dout.size());
  const std::vector<float> want_a = {2, 3, 4, 5, 6}, want_b = {3, 4, 5, 6, 7};
  CHECK_MATCH(scalelab_test::compare_bitwise("da", da.data(), want_a.data(), 5));
  CHECK_MATCH(scalelab_test::compare_bitwise("db", db.data(), want_b.data(), 5));
}
