// `scalelab plan`: the table and the JSON for a real request; exit status 2 and the setting's
// message for a bad one.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_run.hpp"

using scalelab_test::CliResult;
using scalelab_test::run_cli;

TEST_CASE("scalelab plan prints the ranked table and writes every layout as JSON", "[cli]") {
  const std::string json = (std::filesystem::temp_directory_path() / "scalelab_plan_test.json").string();
  std::filesystem::remove(json);
  const CliResult r = run_cli("plan --model gpt2-124m --nodes 1 --gpus-per-node 8 --batch 64 --top 3 --json " + json);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("model gpt2-124m: 124439808 parameters") != std::string::npos);
  CHECK(r.output.find("layout") != std::string::npos);
  CHECK(r.output.find("MFU") != std::string::npos);
  std::ifstream in(json);
  REQUIRE(in);
  const nlohmann::json j = nlohmann::json::parse(in);
  REQUIRE(j["layouts"].size() > 3);
  // The first row is the fastest that fits; every layout uses the 8 ranks.
  CHECK(j["layouts"][0]["fits"].get<bool>());
  for (const auto& l : j["layouts"]) CHECK(l["dp"].get<int>() * l["tp"].get<int>() * l["pp"].get<int>() == 8);
  std::filesystem::remove(json);
}

TEST_CASE("scalelab plan rejects bad settings with exit status 2 and the message", "[cli]") {
  struct Case {
    const char* args;
    const char* message;
  };
  const Case cases[] = {
      {"plan --model gpt5", "model: unknown model 'gpt5'"},
      {"plan --cluster tpu", "cluster: unknown preset 'tpu'"},
      {"plan --nodes 0", "nodes: must be >= 1"},
      {"plan --precision fp8", "precision: unknown precision 'fp8'"},
      {"plan --tp 3", "layout: no layout"},
      {"plan --top 0", "top: must be >= 1"},
  };
  for (const Case& c : cases) {
    const CliResult r = run_cli(c.args);
    INFO(c.args << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
}
