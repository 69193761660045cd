# Test registration. Every Catch2 test case tagged [graded] belongs to a graded test listed in
# tests/grading/*.json (name, lab, points, time limit, binary, Catch2 test spec, ranks, hint):
# the one machine-readable place that CTest and the grader both read. Everything else in a
# binary runs as one "unit" test.
#
#   scalelab_add_test_binary(<target> SOURCES ... [LIBS ...])
#   scalelab_register_graded_tests(<directory>)   (once, after all binaries)

# catch_main.cpp writes the signed verdict that tools/grade.py trusts (graded_results.hpp); a
# custom main() must run Catch2 through scalelab_test::run_catch_session too, or grading fails.
add_library(scalelab_catch_main OBJECT ${PROJECT_SOURCE_DIR}/tests/support/catch_main.cpp)
target_link_libraries(scalelab_catch_main PUBLIC Catch2::Catch2)
target_include_directories(scalelab_catch_main PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)

add_library(scalelab_test_support INTERFACE)
target_include_directories(scalelab_test_support INTERFACE ${PROJECT_SOURCE_DIR}/tests/support)
# Only the source directory, which every build directory shares: a definition naming the build
# directory would change every test file's compile command per build directory, and ccache
# could not reuse one build's objects in another (the lab builds of CI, the grader's).
target_compile_definitions(scalelab_test_support INTERFACE SCALELAB_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# The prior stage from the reference, for tests that compare stage N with stage N-1.
# PRIVATE: the namespace rename applies to prior_stage.cpp only; the reference library still
# reaches the test's link line (a static library's private dependencies are link-only).
add_library(scalelab_prior_stage STATIC ${PROJECT_SOURCE_DIR}/tests/support/prior_stage.cpp)
target_link_libraries(scalelab_prior_stage PRIVATE scalelab_ref_api scalelab_flags)
target_include_directories(scalelab_prior_stage PUBLIC ${PROJECT_SOURCE_DIR}/tests/support)

# mpiexec as root needs these; --oversubscribe lets 4 ranks share 2 cores.
set(SCALELAB_MPI_TEST_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1)
if(SCALELAB_SANITIZE)
  # OpenMPI's plugins (dlopen'ed, closed before exit) leave allocations that LeakSanitizer can
  # neither attribute nor suppress by name. Multi-rank tests still run under ASan and UBSan; leak
  # checking stays on for every single-process test.
  list(APPEND SCALELAB_MPI_TEST_ENV ASAN_OPTIONS=detect_leaks=0)
endif()
# A GPU test binary exits with this code when no GPU is present: CTest reports it as skipped.
set(SCALELAB_SKIP_RETURN_CODE 77)

function(scalelab_add_test_binary target)
  cmake_parse_arguments(A "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${target} ${A_SOURCES} $<TARGET_OBJECTS:scalelab_catch_main>)
  target_link_libraries(${target} PRIVATE scalelab Catch2::Catch2 scalelab_test_support scalelab_flags ${A_LIBS})
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  add_test(NAME ${target} COMMAND ${target} "~[graded]")
  set_tests_properties(${target} PROPERTIES LABELS unit TIMEOUT 900 SKIP_RETURN_CODE ${SCALELAB_SKIP_RETURN_CODE})
endfunction()

function(scalelab_register_graded_tests dir)
  file(GLOB json_files CONFIGURE_DEPENDS ${dir}/*.json)
  foreach(json_file IN LISTS json_files)
    scalelab_register_graded_file(${json_file})
  endforeach()
endfunction()

function(scalelab_register_graded_file json_file)
  file(READ ${json_file} json)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${json_file})
  string(JSON n LENGTH "${json}" tests)
  if(n EQUAL 0)
    return()
  endif()
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    string(JSON name GET "${json}" tests ${i} name)
    string(JSON lab GET "${json}" tests ${i} lab)
    string(JSON binary GET "${json}" tests ${i} binary)
    string(JSON spec GET "${json}" tests ${i} spec)
    string(JSON timeout GET "${json}" tests ${i} timeout)
    string(JSON ranks ERROR_VARIABLE no_ranks GET "${json}" tests ${i} ranks)
    if(NOT TARGET ${binary})
      continue()  # e.g. an MPI test where MPI was not found
    endif()
    set(labels lab${lab})
    string(JSON extra ERROR_VARIABLE no_labels GET "${json}" tests ${i} labels)
    if(NOT no_labels)
      string(JSON nl LENGTH "${extra}")
      math(EXPR nl_last "${nl} - 1")
      foreach(j RANGE ${nl_last})
        string(JSON l GET "${extra}" ${j})
        list(APPEND labels ${l})
      endforeach()
    endif()
    if(no_ranks)
      add_test(NAME ${name} COMMAND ${binary} -w NoTests "${spec}")
    else()
      add_test(NAME ${name} COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ranks} --oversubscribe
                                    $<TARGET_FILE:${binary}> -w NoTests "${spec}")
      list(APPEND labels mpi)
      set_tests_properties(${name} PROPERTIES ENVIRONMENT "${SCALELAB_MPI_TEST_ENV}")
    endif()
    set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${timeout}
                                            SKIP_RETURN_CODE ${SCALELAB_SKIP_RETURN_CODE})
  endforeach()
endfunction()
