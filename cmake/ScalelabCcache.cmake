# ccache (a Debian package; tools/setup.sh installs it). The kit builds the same sources in several
# build directories: build/release, build/cuda, the grader's build/grade-NN and CI's reference and
# skeleton builds. With ccache every directory after the first reuses the objects whose source and
# flags are unchanged, so a student's grading build recompiles only their own files.
# Off with -DSCALELAB_CCACHE=OFF; a launcher given on the command line is kept.
if(NOT SCALELAB_CCACHE)
  return()
endif()
find_program(SCALELAB_CCACHE_PROGRAM ccache)
if(NOT SCALELAB_CCACHE_PROGRAM)
  return()
endif()
foreach(lang C CXX CUDA)
  if(NOT CMAKE_${lang}_COMPILER_LAUNCHER)
    set(CMAKE_${lang}_COMPILER_LAUNCHER ${SCALELAB_CCACHE_PROGRAM})
  endif()
endforeach()
message(STATUS "scalelab: compiling through ${SCALELAB_CCACHE_PROGRAM}")
