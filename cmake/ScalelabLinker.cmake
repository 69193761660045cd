# The linker. The kit links many executables against one large static library (about 60 test
# binaries, the CLI and the benchmarks), and the grader and CI relink them for every submission;
# with GNU ld that linking was a large share of a build. LLVM's lld (a Debian package; tools/setup.sh
# installs it) links the same objects into equivalent executables several times faster, so it is
# used where the compiler accepts it. Only C++ links take the flag: nvcc, which links the
# executables that hold CUDA code, has no such option. Off with -DSCALELAB_LLD=OFF.
option(SCALELAB_LLD "Link with LLVM's lld where it is installed (faster links; the same programs)" ON)
if(NOT SCALELAB_LLD)
  return()
endif()
include(CheckLinkerFlag)
check_linker_flag(CXX "-fuse-ld=lld" SCALELAB_HAVE_LLD)
if(SCALELAB_HAVE_LLD)
  add_link_options("$<$<LINK_LANGUAGE:CXX>:-fuse-ld=lld>")
  message(STATUS "scalelab: linking C++ programs with lld")
endif()
