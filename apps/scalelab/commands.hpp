// The `scalelab` program's subcommands; each file adds one to the CLI11 app. A command does its
// work in its CLI11 callback (run during parsing) and reports failure by throwing; main() turns
// exceptions into messages and exit statuses.
#pragma once

#include <CLI/CLI.hpp>

namespace scalelab::cli {

void add_train_command(CLI::App& app);
void add_ladder_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_schedule_command(CLI::App& app);
void add_plan_command(CLI::App& app);
// `bench comm` lives under the `bench` parent.
void add_bench_comm_command(CLI::App& bench);

}  // namespace scalelab::cli
