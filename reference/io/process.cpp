// posix_spawnp and waitpid, with the wait status decoded.
#include "io/process.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"

extern char** environ;

namespace scalelab {

std::string ProcessResult::describe() const {
  if (exited) return "exited with status " + std::to_string(exit_code);
  return "was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
}

ProcessResult process_result_from_wait_status(int status) {
  ProcessResult r;
  if (WIFEXITED(status)) {
    r.exited = true;
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  return r;
}

ProcessResult run_process(const std::vector<std::string>& argv) {
  SCALELAB_CHECK(!argv.empty(), "run_process needs a program");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
  require(rc == 0, argv[0], std::string("cannot be started: ") + std::strerror(rc),
          "install it or put it on PATH (mpirun: apt-get install openmpi-bin)");
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error(std::string("waitpid for ") + argv[0] + ": " + std::strerror(errno));
  return process_result_from_wait_status(status);
}

}  // namespace scalelab
