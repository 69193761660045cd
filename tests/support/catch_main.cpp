// The one translation unit that holds Catch2's main (compiled once, linked into every test).
// Catch2 runs through run_catch_session, which writes the graded verdict for tools/grade.py
// after the session returns (graded_results.hpp).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "graded_results.hpp"

int main(int argc, char** argv) { return scalelab_test::run_catch_session(argc, argv); }
