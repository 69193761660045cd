// How the GPU test binaries run Catch2. Its implementation is compiled once, in gpu_catch.cpp (an
// object library linked into every GPU test binary): each of the six binaries used to compile it
// in its own main file, 30-40 s of compiler time apiece. The mains include only this header and
// <catch2/catch.hpp> without CATCH_CONFIG_RUNNER.
#pragma once

#include <string>
#include <vector>

namespace scalelab_test {

// Parses the command line and runs the tests it selects; returns the command line's error code,
// else the number of failed tests. `only`, when given, replaces the selection with these test
// specs (e.g. {"[refusal]"}).
int run_gpu_catch(int argc, char** argv, const std::vector<std::string>& only = {});

}  // namespace scalelab_test
