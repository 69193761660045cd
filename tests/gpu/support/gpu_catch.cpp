// Catch2's implementation for the GPU test binaries (gpu_catch.hpp says why it lives here).
#define CATCH_CONFIG_RUNNER
#include "gpu_catch.hpp"

#include <catch2/catch.hpp>

int scalelab_test::run_gpu_catch(int argc, char** argv, const std::vector<std::string>& only) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  if (!only.empty()) session.configData().testsOrTags = only;
  return session.run();
}
