// Runs the scalelab program from a test (whose target depends on scalelab_cli) with the given
// arguments; stdout and stderr together. The program is found beside the test in the build tree
// (<build>/tests/<test>, <build>/bin/scalelab) at run time, not through a compile definition:
// a definition naming the build directory would make every build directory compile the file
// anew, where ccache now reuses the object.
#pragma once

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace scalelab_test {

struct CliResult {
  int status = -1;  // the exit status; -1 if the program did not exit normally
  std::string output;
};

inline std::string scalelab_cli_path() {
  const std::filesystem::path test = std::filesystem::read_symlink("/proc/self/exe");
  return (test.parent_path().parent_path() / "bin" / "scalelab").string();
}

inline CliResult run_cli(const std::string& args) {
  const std::string cmd = scalelab_cli_path() + " " + args + " 2>&1";
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
