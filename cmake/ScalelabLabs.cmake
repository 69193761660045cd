# Lab selection: for each lab named in SCALELAB_LABS, the student's copy of a reference source
# (labs/NN-name/<path under reference/>, written by tools/labgen.py) is compiled in its place.
# Everything else comes from reference/, so lab N never needs the student's lab N-1.
#
#   SCALELAB_LABS=none | all | 00;01       which labs compile the student files
#   SCALELAB_LAB_DIR_<NN>=<dir>            take lab NN's student files from <dir> instead of
#                                          labs/NN-name (the grader points it at a submission)
#   SCALELAB_HIDDEN_TESTS=<dir>[;<dir>]    extra test directories outside the repository (an
#                                          instructor's hidden tests): each has a CMakeLists.txt
#                                          using scalelab_add_test_binary and *.json graded tests

set(SCALELAB_ALL_LABS "")
file(GLOB _lab_dirs LIST_DIRECTORIES true ${CMAKE_CURRENT_SOURCE_DIR}/labs/[0-9][0-9]-*)
foreach(_dir IN LISTS _lab_dirs)
  if(IS_DIRECTORY ${_dir})
    get_filename_component(_name ${_dir} NAME)
    string(SUBSTRING ${_name} 0 2 _num)
    list(APPEND SCALELAB_ALL_LABS ${_num})
    if(NOT SCALELAB_LAB_DIR_${_num})  # a -DSCALELAB_LAB_DIR_NN=... from the command line wins
      set(SCALELAB_LAB_DIR_${_num} ${_dir})
    endif()
  endif()
endforeach()

if(SCALELAB_LABS STREQUAL "none" OR SCALELAB_LABS STREQUAL "")
  set(SCALELAB_SELECTED_LABS "")
elseif(SCALELAB_LABS STREQUAL "all")
  set(SCALELAB_SELECTED_LABS ${SCALELAB_ALL_LABS})
else()
  string(REPLACE "," ";" SCALELAB_SELECTED_LABS "${SCALELAB_LABS}")
  foreach(_num IN LISTS SCALELAB_SELECTED_LABS)
    if(NOT DEFINED SCALELAB_LAB_DIR_${_num})
      message(FATAL_ERROR "SCALELAB_LABS names lab '${_num}', which does not exist. "
                          "Known labs: ${SCALELAB_ALL_LABS}. Use none, all, or a list such as 00;01.")
    endif()
  endforeach()
endif()
foreach(_num IN LISTS SCALELAB_SELECTED_LABS)
  if(NOT IS_DIRECTORY "${SCALELAB_LAB_DIR_${_num}}")
    message(FATAL_ERROR "SCALELAB_LAB_DIR_${_num} is '${SCALELAB_LAB_DIR_${_num}}', which is not a directory. "
                        "Point it at a directory laid out like labs/${_num}-*/, or leave it unset.")
  endif()
  message(STATUS "scalelab: lab ${_num} compiles the student files in ${SCALELAB_LAB_DIR_${_num}}")
endforeach()

# scalelab_lab_sources(<out> <reference sources...>): the list with student copies swapped in.
# A file with regions of several labs has a student copy in each of them (each with only its own
# lab's regions stubbed). If several selected labs have one, the highest lab's copy is compiled
# and the lower labs' regions in that file come from the reference: grade lab NN in a build with
# SCALELAB_LABS=NN (tools/grade.py does) to test every region of lab NN.
function(scalelab_lab_sources out)
  set(result "")
  foreach(src IN LISTS ARGN)
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR}/reference ${src})
    set(chosen ${src})
    set(chosen_lab "")
    foreach(num IN LISTS SCALELAB_SELECTED_LABS)
      if(EXISTS ${SCALELAB_LAB_DIR_${num}}/${rel})
        if(chosen_lab)
          message(STATUS "scalelab: ${rel} has student copies in labs ${chosen_lab} and ${num}; compiling lab "
                         "${num}'s, so lab ${chosen_lab}'s regions in it come from the reference")
        endif()
        set(chosen ${SCALELAB_LAB_DIR_${num}}/${rel})
        set(chosen_lab ${num})
      endif()
    endforeach()
    list(APPEND result ${chosen})
  endforeach()
  set(${out} ${result} PARENT_SCOPE)
endfunction()

# Hidden tests: read after tests/ (deferred to the end of the top-level CMakeLists.txt), so that
# scalelab_add_test_binary and the scalelab targets exist. CMake forbids add_subdirectory in a
# deferred call, so each directory's CMakeLists.txt is include()d: it must name its sources
# relative to ${CMAKE_CURRENT_LIST_DIR} (see docs/instructors.md, "Hidden tests").
set(SCALELAB_HIDDEN_TESTS "" CACHE STRING
    "Directories of extra (hidden) tests outside the repository, each with a CMakeLists.txt and *.json graded tests")
function(scalelab_add_hidden_tests)
  if(NOT SCALELAB_BUILD_TESTS)
    return()
  endif()
  # The settings that tests/ defines for its test registration, read from that directory.
  foreach(var SCALELAB_SKIP_RETURN_CODE SCALELAB_MPI_TEST_ENV)
    get_directory_property(${var} DIRECTORY ${PROJECT_SOURCE_DIR}/tests DEFINITION ${var})
  endforeach()
  foreach(dir IN LISTS SCALELAB_HIDDEN_TESTS)
    get_filename_component(dir "${dir}" ABSOLUTE)
    if(NOT EXISTS ${dir}/CMakeLists.txt)
      message(FATAL_ERROR "SCALELAB_HIDDEN_TESTS: ${dir} has no CMakeLists.txt. A hidden test directory holds a "
                          "CMakeLists.txt that calls scalelab_add_test_binary with sources under "
                          "\${CMAKE_CURRENT_LIST_DIR}, the test sources, and *.json graded tests "
                          "(format: tests/grading/README.md).")
    endif()
    message(STATUS "scalelab: hidden tests from ${dir}")
    include(${dir}/CMakeLists.txt)
    scalelab_register_graded_tests(${dir})
  endforeach()
endfunction()
if(SCALELAB_HIDDEN_TESTS)
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL scalelab_add_hidden_tests)
endif()
