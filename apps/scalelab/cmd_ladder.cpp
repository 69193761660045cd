// `scalelab ladder`: placeholder until the stage ladder lands.
#include "commands.hpp"
namespace scalelab::cli {
void add_ladder_command(CLI::App&) {}
void add_bench_comm_command(CLI::App&) {}
}  // namespace scalelab::cli
