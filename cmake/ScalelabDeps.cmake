# Every dependency is a Debian package (tools/setup.sh installs them); nothing is downloaded.
find_package(Threads REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)

# BLAS: OpenBLAS gives cblas_sgemm/cblas_dgemm and lets us pin its thread count.
find_path(SCALELAB_CBLAS_INCLUDE NAMES cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread)
find_library(SCALELAB_OPENBLAS_LIB NAMES openblas)
if(NOT SCALELAB_CBLAS_INCLUDE OR NOT SCALELAB_OPENBLAS_LIB)
  message(FATAL_ERROR "OpenBLAS not found: install it with `apt-get install libopenblas-dev` "
                      "(tools/setup.sh does this for you).")
endif()
add_library(scalelab_blas INTERFACE)
target_include_directories(scalelab_blas INTERFACE ${SCALELAB_CBLAS_INCLUDE})
target_link_libraries(scalelab_blas INTERFACE ${SCALELAB_OPENBLAS_LIB})

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
message(STATUS "scalelab: MPI ${SCALELAB_MPI_ENABLED}, CUDA ${SCALELAB_CUDA_ENABLED}, labs '${SCALELAB_LABS}'")
