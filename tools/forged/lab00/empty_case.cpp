// Forged: the submission registers a graded test case of its own that checks nothing, with the
// tags of every test that covers adamw_step, so it runs beside the real one. Catch2 passes a test
// case without assertions; the grader must not.
#include <catch2/catch.hpp>

TEST_CASE("forged: a graded test case without assertions", "[graded][memory00][oracle_adamw][oracle_train]") {}

namespace {
void forged() {}
}  // namespace
