// Running another program and telling how it ended. The ladder (apps/scalelab/cmd_ladder.cpp)
// starts its multi-rank rungs as `mpirun ... scalelab train --options-file F`: an argument
// vector, not a shell command line, so no value is ever quoted or re-typed, and the wait status
// is decoded (an exit code is not a signal).
#pragma once

#include <string>
#include <vector>

namespace scalelab {

struct ProcessResult {
  bool exited = false;  // ended by exit(): exit_code is valid
  int exit_code = -1;
  int signal = 0;  // killed by this signal (when !exited)
  bool ok() const { return exited && exit_code == 0; }
  // "exited with status 2", "was killed by signal 9 (Killed)".
  std::string describe() const;
};

// Decodes a waitpid() status.
ProcessResult process_result_from_wait_status(int status);

// Starts argv[0] (searched in PATH) with these arguments, sharing this process's stdout and
// stderr, and waits for it. Throws ConfigError naming the program when it cannot be started.
ProcessResult run_process(const std::vector<std::string>& argv);

}  // namespace scalelab
