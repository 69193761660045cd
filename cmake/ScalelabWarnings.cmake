# Compiler flags shared by every scalelab target: warnings on, sanitizers on request.
add_library(scalelab_flags INTERFACE)
target_compile_options(scalelab_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor>)
if(SCALELAB_WERROR)
  target_compile_options(scalelab_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(SCALELAB_SANITIZE)
  target_compile_options(scalelab_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(scalelab_flags INTERFACE -fsanitize=address,undefined)
endif()

# The optimisation level of code whose run time is nothing beside the library's: the test files
# (mostly Catch2 assertions) and the `scalelab` program's own code (CLI11 flags, nlohmann/json).
# Their templates are slow to optimise, and the arithmetic they start runs in the library, built
# as configured. Optimised builds compile them at -O1 (tests/dist/test_pipeline.cpp: 12 s against
# 18 s at -O3; apps/scalelab/cmd_plan.cpp: 20 s against 28 s). Under the sanitizers -O0, which
# halves their compile time (cmd_ladder.cpp with ASan and UBSan: 55 s at -O1, 25 s at -O0) and
# checks the same accesses. Debug builds keep CMake's own level.
if(SCALELAB_SANITIZE)
  set(SCALELAB_LIGHT_OPT -O0)
else()
  set(SCALELAB_LIGHT_OPT $<$<NOT:$<CONFIG:Debug>>:-O1>)
endif()
