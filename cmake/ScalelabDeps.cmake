# Every dependency is a Debian package (tools/setup.sh installs them); nothing is downloaded.
find_package(Threads REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)

# BLAS (SCALELAB_BLAS, CMakeLists.txt): the matrix products of core/blas.hpp.
#   onednn    oneDNN's dnnl_sgemm for float, OpenBLAS's cblas_dgemm for double (oneDNN has no dgemm;
#             the double products serve gradient checks only)
#   openblas  OpenBLAS's cblas_sgemm and cblas_dgemm
#   blis      BLIS's CBLAS interface for both (Debian's OpenMP build)
# OpenBLAS is found in every case (onednn uses it for double). Only the files that call the library
# (reference/core/blas.cpp, bench/sgemm_clock.cpp) get SCALELAB_BLAS_DEFINE, so switching
# libraries recompiles those two and relinks the rest.
find_path(SCALELAB_CBLAS_INCLUDE NAMES cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread)
find_library(SCALELAB_OPENBLAS_LIB NAMES openblas)
if(NOT SCALELAB_CBLAS_INCLUDE OR NOT SCALELAB_OPENBLAS_LIB)
  message(FATAL_ERROR "OpenBLAS not found: install it with `apt-get install libopenblas-dev` "
                      "(tools/setup.sh does this for you).")
endif()
add_library(scalelab_blas INTERFACE)
if(SCALELAB_BLAS STREQUAL "onednn")
  find_path(SCALELAB_DNNL_INCLUDE NAMES dnnl.h)
  find_library(SCALELAB_DNNL_LIB NAMES dnnl)
  if(NOT SCALELAB_DNNL_INCLUDE OR NOT SCALELAB_DNNL_LIB)
    message(FATAL_ERROR "SCALELAB_BLAS=onednn but oneDNN was not found: install it with "
                        "`apt-get install libdnnl-dev` (tools/setup.sh does this for you), "
                        "or configure with -DSCALELAB_BLAS=openblas")
  endif()
  # oneDNN (Debian's build) runs its threads with OpenMP; set_blas_threads calls omp_set_num_threads.
  find_package(OpenMP REQUIRED COMPONENTS CXX)
  target_include_directories(scalelab_blas INTERFACE ${SCALELAB_DNNL_INCLUDE} ${SCALELAB_CBLAS_INCLUDE})
  target_link_libraries(scalelab_blas INTERFACE ${SCALELAB_DNNL_LIB} ${SCALELAB_OPENBLAS_LIB} ${OpenMP_CXX_LIBRARIES})
  set(SCALELAB_BLAS_DEFINE SCALELAB_BLAS_ONEDNN)
elseif(SCALELAB_BLAS STREQUAL "blis")
  find_path(SCALELAB_BLIS_INCLUDE NAMES blis.h PATH_SUFFIXES blis x86_64-linux-gnu/blis-openmp)
  find_library(SCALELAB_BLIS_LIB NAMES blis PATH_SUFFIXES blis-openmp x86_64-linux-gnu/blis-openmp)
  if(NOT SCALELAB_BLIS_INCLUDE OR NOT SCALELAB_BLIS_LIB)
    message(FATAL_ERROR "SCALELAB_BLAS=blis but BLIS was not found: install it with `apt-get install libblis-dev`, "
                        "or configure with -DSCALELAB_BLAS=openblas")
  endif()
  target_include_directories(scalelab_blas INTERFACE ${SCALELAB_BLIS_INCLUDE})
  target_link_libraries(scalelab_blas INTERFACE ${SCALELAB_BLIS_LIB})
  set(SCALELAB_BLAS_DEFINE SCALELAB_BLAS_BLIS)
elseif(SCALELAB_BLAS STREQUAL "openblas")
  target_include_directories(scalelab_blas INTERFACE ${SCALELAB_CBLAS_INCLUDE})
  target_link_libraries(scalelab_blas INTERFACE ${SCALELAB_OPENBLAS_LIB})
  set(SCALELAB_BLAS_DEFINE SCALELAB_BLAS_OPENBLAS)
else()
  message(FATAL_ERROR "SCALELAB_BLAS='${SCALELAB_BLAS}': use onednn, openblas or blis")
endif()

if(SCALELAB_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()
if(SCALELAB_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

find_package(MPI COMPONENTS CXX)
set(SCALELAB_MPI_ENABLED ${MPI_CXX_FOUND})

# CUDA: found through nvcc under /usr/local/cuda unless told otherwise.
set(SCALELAB_CUDA_ENABLED OFF)
if(NOT SCALELAB_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(SCALELAB_CUDA_ENABLED ON)
  elseif(SCALELAB_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SCALELAB_CUDA=ON but no nvcc was found: install the CUDA Toolkit "
                        "or configure with -DSCALELAB_CUDA=OFF")
  endif()
endif()
message(STATUS "scalelab: BLAS ${SCALELAB_BLAS}, MPI ${SCALELAB_MPI_ENABLED}, CUDA ${SCALELAB_CUDA_ENABLED}, labs '${SCALELAB_LABS}'")
