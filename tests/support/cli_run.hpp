// Runs the scalelab program from a test: SCALELAB_CLI_PATH (a compile definition of the test's
// target, which also depends on scalelab_cli) with the given arguments; stdout and stderr together.
#pragma once

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <string>

namespace scalelab_test {

struct CliResult {
  int status = -1;  // the exit status; -1 if the program did not exit normally
  std::string output;
};

inline CliResult run_cli(const std::string& args) {
  const std::string cmd = std::string(SCALELAB_CLI_PATH) + " " + args + " 2>&1";
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p)) r.output += buf.data();
  const int raw = pclose(p);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

}  // namespace scalelab_test
