// `scalelab tokenize`: a text file to an llm.c token shard (byte-level: one token per byte).
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "data/tokens.hpp"

namespace scalelab::cli {

void add_tokenize_command(CLI::App& app) {
  auto input = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Write a text file as an llm.c token shard (one token per byte)");
  cmd->add_option("input", *input, "Text file")->required();
  cmd->add_option("output", *output, "Shard to write (.bin)")->required();
  cmd->callback([input, output] {
    const std::vector<std::uint16_t> tokens = load_tokens(*input);
    write_token_shard(*output, tokens);
    std::printf("wrote %zu tokens to %s\n", tokens.size(), output->c_str());
  });
}

}  // namespace scalelab::cli
